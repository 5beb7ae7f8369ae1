package k8stest

import (
	"context"
	"io"
	"net"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Termination is how Fail ends a pod.
type Termination struct {
	// PodReason is the pod's status.reason (Evicted, NodeLost, ...).
	PodReason string
	// ContainerReason and ExitCode describe the container's end
	// (OOMKilled, Error, ...); empty ContainerReason leaves the container
	// without a terminated state.
	ContainerReason string
	ExitCode        int32
	FinishedAt      time.Time
}

// Fail stops a pod's server and reports it Failed as t describes.
func (k *Kubelet) Fail(ctx context.Context, podName string, t Termination) error {
	k.stop(ctx, podName, false)
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodFailed
	pod.Status.Reason = t.PodReason
	fin := metav1.NewTime(t.FinishedAt)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: fin}}
	cs := corev1.ContainerStatus{Name: "sandbox", Image: pod.Spec.Containers[0].Image}
	if t.ContainerReason != "" {
		cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: t.ContainerReason, ExitCode: t.ExitCode, FinishedAt: fin}
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	_, err = k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}

// forward relays each connection to the pod's address to the server.
func forward(ln net.Listener, to string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		wg.Go(func() {
			defer c.Close()
			up, err := net.Dial("tcp", to)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2) // both copiers report; neither blocks
			go func() { _, _ = io.Copy(up, c); up.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
			<-done
			// One side ended: end the other, so neither copier lingers
			// on a peer that keeps its half open.
			c.Close()
			up.Close()
			<-done
		})
	}
}
