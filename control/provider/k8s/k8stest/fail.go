package k8stest

import (
	"context"
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

// Fail kills a pod's init (SIGKILL, as the OOM killer or a lost node
// would end it) and reports the pod Failed as t describes.
func (k *Kubelet) Fail(ctx context.Context, podName string, t Termination) error {
	k.mu.Lock()
	var p *initProc
	if r := k.pods[podName]; r != nil {
		r.stopping, p = true, r.proc
	}
	k.mu.Unlock()
	if p != nil {
		p.terminate(0)
	}
	pod, err := k.client.CoreV1().Pods(k.ns).Get(ctx, podName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	return k.report(ctx, pod, t, "")
}

// report ends the pod: Succeeded for a container that completed, else
// Failed, with t's reasons and message.
func (k *Kubelet) report(ctx context.Context, pod *corev1.Pod, t Termination, message string) error {
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodFailed
	if t.ContainerReason == "Completed" {
		pod.Status.Phase = corev1.PodSucceeded
	}
	pod.Status.Reason, pod.Status.Message = t.PodReason, message
	fin := metav1.NewTime(t.FinishedAt)
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse, LastTransitionTime: fin}}
	cs := corev1.ContainerStatus{Name: "sandbox", Image: pod.Spec.Containers[0].Image}
	if t.ContainerReason != "" {
		cs.State.Terminated = &corev1.ContainerStateTerminated{Reason: t.ContainerReason, ExitCode: t.ExitCode, FinishedAt: fin}
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	_, err := k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return err
}
