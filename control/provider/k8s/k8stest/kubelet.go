// Package k8stest is a test kubelet for the k8s provider, and a test's
// own namespace on a real kube-apiserver (internal/kubetest) with control's
// Role from deploy/ applied (NewCluster). The kubelet watches the
// namespace's pods through the API and, for each, does what a node and the sandbox
// image's init would: it reads the pod's Secret (waiting for a host key, as
// a warm pod does), starts a real SSH server (the local provider's
// embedded server) behind the pod's own loopback IP and the SSH port, and
// reports the pod Running with that IP. It plays the CSI driver too:
// VolumeSnapshots copy the PVC's directory and become readyToUse, and a PVC
// with a snapshot data source starts as that copy. Fail ends a pod with a
// terminal phase and reason on demand.
package k8stest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/local"
)

// Kubelet runs pods of one namespace. Close stops every server.
type Kubelet struct {
	client kubernetes.Interface
	dyn    dynamic.Interface
	ns     string
	dir    string
	local  *local.Local
	port   int
	log    *slog.Logger

	mu     sync.Mutex // guards pods, nextIP, failed, deleted
	pods   map[string]*podRun
	failed map[string]bool
	nextIP uint32
	// deleted holds pods the watch saw deleted (name -> the IP we gave
	// it), for the sync loop to stop. Stopping there rather than in the
	// watch goroutine keeps every start and stop of a pod's server on one
	// goroutine: the local provider keys servers by pod name, and a stop
	// of the deleted pod running late, concurrently with the start of
	// its same-named successor (restore after suspend), destroyed the
	// successor's fresh sshd and left its relay dialing nothing.
	deleted map[string]string

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type podRun struct {
	ip      string
	serving bool
	ln      net.Listener
}

// Start runs a kubelet for namespace ns until the test ends, acting
// through client and dyn (cluster-admin clients: a kubelet is not under
// control's Role).
func Start(t testing.TB, client kubernetes.Interface, dyn dynamic.Interface, ns string) *Kubelet {
	t.Helper()
	dir := t.TempDir()
	lp, err := local.New(local.Config{DataDir: filepath.Join(dir, "local")})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	k := &Kubelet{
		client: client, dyn: dyn, ns: ns, dir: dir, local: lp, port: port,
		log:  slog.New(slog.DiscardHandler),
		pods: map[string]*podRun{}, failed: map[string]bool{}, deleted: map[string]string{},
		// Each kubelet hands out its own block of 127/8 so parallel tests
		// binding the same port never collide.
		nextIP: 127<<24 | uint32(rand.IntN(200)+20)<<16 | uint32(rand.IntN(250))<<8 | 1,
		cancel: cancel,
	}
	watches := []func(context.Context) (watch.Interface, error){
		func(ctx context.Context) (watch.Interface, error) {
			return client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		},
		func(ctx context.Context) (watch.Interface, error) {
			return client.CoreV1().Secrets(ns).Watch(ctx, metav1.ListOptions{})
		},
		func(ctx context.Context) (watch.Interface, error) {
			return dyn.Resource(k8s.SnapshotGVR).Namespace(ns).Watch(ctx, metav1.ListOptions{})
		},
	}
	kick := make(chan struct{}, 1)
	for _, w := range watches {
		wi, err := w(ctx)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		k.wg.Go(func() {
			defer wi.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						return
					}
					// A pod deleted and created again under the same name
					// (restore after suspend) must not be mistaken for
					// the old one, so the next sync stops the deleted
					// one's server even if the successor is listed.
					if pod, isPod := ev.Object.(*corev1.Pod); isPod && ev.Type == watch.Deleted {
						k.mu.Lock()
						k.deleted[pod.Name] = pod.Status.PodIP
						k.mu.Unlock()
					}
					select {
					case kick <- struct{}{}:
					default:
					}
				}
			}
		})
	}
	k.wg.Go(func() {
		tick := time.NewTicker(200 * time.Millisecond) // catches events coalesced away
		defer tick.Stop()
		for {
			if err := k.sync(ctx); err != nil && ctx.Err() == nil {
				k.log.Warn("kubelet sync", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-kick:
			case <-tick.C:
			}
		}
	})
	t.Cleanup(k.Close)
	return k
}

// SSHPort is the port every pod's sshd answers on; give it to the
// provider's Config.SSHPort.
func (k *Kubelet) SSHPort() int { return k.port }

// WorkspaceDir is the provider's Config.WorkspaceDir for this kubelet:
// every pod's workspace on this machine's filesystem.
func (k *Kubelet) WorkspaceDir() string { return filepath.Join(k.dir, "pods", "%s", "workspace") }

// Close stops the watch loop and every pod's server.
func (k *Kubelet) Close() {
	k.cancel()
	k.mu.Lock()
	pods := k.pods
	k.pods = map[string]*podRun{}
	k.mu.Unlock()
	for _, r := range pods {
		if r.ln != nil {
			r.ln.Close()
		}
	}
	k.local.Close() // ends relayed connections, so forwarders return
	k.wg.Wait()
}

// sync converges once: snapshots, new pods, deleted pods.
func (k *Kubelet) sync(ctx context.Context) error {
	k.stopDeleted(ctx)
	var errs []error
	if err := k.syncSnapshots(ctx); err != nil {
		errs = append(errs, err)
	}
	list, err := k.client.CoreV1().Pods(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := k.releaseClaims(ctx, list.Items); err != nil {
		errs = append(errs, err)
	}
	live := map[string]bool{}
	for i := range list.Items {
		pod := &list.Items[i]
		live[pod.Name] = true
		if pod.Status.Phase == corev1.PodFailed || pod.Status.Phase == corev1.PodSucceeded {
			continue
		}
		if err := k.run(ctx, pod); err != nil {
			errs = append(errs, fmt.Errorf("pod %s: %w", pod.Name, err))
		}
	}
	k.mu.Lock()
	var gone []string
	for name := range k.pods {
		if !live[name] {
			gone = append(gone, name)
		}
	}
	k.mu.Unlock()
	for _, name := range gone {
		k.stop(ctx, name, true)
	}
	return errors.Join(errs...)
}

// run starts what the pod needs that is not running yet.
func (k *Kubelet) run(ctx context.Context, pod *corev1.Pod) error {
	k.mu.Lock()
	r := k.pods[pod.Name]
	if r != nil && r.serving && pod.Status.PodIP == "" {
		// Serving, yet the pod has no IP from us: a new pod under an old
		// name whose deletion this kubelet did not see in time.
		k.mu.Unlock()
		k.stop(ctx, pod.Name, true)
		k.mu.Lock()
		r = nil
	}
	if r == nil {
		r = &podRun{ip: k.allocIPLocked()}
		k.pods[pod.Name] = r
	}
	serving := r.serving
	k.mu.Unlock()
	if serving {
		return nil
	}
	spec, ok, err := k.specFor(ctx, pod)
	if err != nil {
		return err
	}
	if ok {
		if err := k.mountWorkspace(ctx, pod); err != nil {
			return err
		}
		ep, err := k.local.Provision(ctx, spec)
		if err != nil {
			return fmt.Errorf("start sshd: %w", err)
		}
		ln, err := k.listen(r)
		if err != nil {
			return err
		}
		k.wg.Go(func() { forward(ln, ep.Addr) })
		k.mu.Lock()
		r.serving, r.ln = true, ln
		k.mu.Unlock()
	}
	if pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP == r.ip {
		return nil
	}
	// The container runs from here on; a warm pod's init waits inside it
	// for its host key.
	now := metav1.Now()
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.PodIP = r.ip
	pod.Status.PodIPs = []corev1.PodIP{{IP: r.ip}}
	pod.Status.StartTime = &now
	pod.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "sandbox", Ready: true, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
	}}
	_, err = k.client.CoreV1().Pods(k.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	return ignoreGone(err)
}

func (k *Kubelet) allocIPLocked() string {
	k.nextIP++
	ip := net.IPv4(byte(k.nextIP>>24), byte(k.nextIP>>16), byte(k.nextIP>>8), byte(k.nextIP))
	return ip.String()
}

// listen binds the pod's IP and SSH port, moving the pod to a fresh IP if
// that one is taken.
func (k *Kubelet) listen(r *podRun) (net.Listener, error) {
	var last error
	for range 20 {
		ln, err := net.Listen("tcp", net.JoinHostPort(r.ip, strconv.Itoa(k.port)))
		if err == nil {
			return ln, nil
		}
		last = err
		k.mu.Lock()
		r.ip = k.allocIPLocked()
		k.mu.Unlock()
	}
	return nil, fmt.Errorf("no free pod address: %w", last)
}

// specFor reads the pod's Secret as the image's init would: ok is false
// while the Secret has no host key (an unclaimed warm pod).
func (k *Kubelet) specFor(ctx context.Context, pod *corev1.Pod) (provider.Spec, bool, error) {
	var secretName string
	for _, v := range pod.Spec.Volumes {
		if v.Secret != nil {
			secretName = v.Secret.SecretName
		}
	}
	sec, err := k.client.CoreV1().Secrets(k.ns).Get(ctx, secretName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return provider.Spec{}, false, nil
	}
	if err != nil {
		return provider.Spec{}, false, err
	}
	if len(sec.Data["host_key"]) == 0 {
		return provider.Spec{}, false, nil
	}
	spec := provider.Spec{SandboxID: pod.Name, HostKeyPEM: sec.Data["host_key"], UserCAKey: string(sec.Data["user_ca.pub"])}
	var entries []k8s.FileEntry
	if err := json.Unmarshal(sec.Data["files.json"], &entries); err != nil {
		return provider.Spec{}, false, fmt.Errorf("files.json: %w", err)
	}
	for _, e := range entries {
		spec.Files = append(spec.Files, provider.File{Path: e.Path, Mode: e.Mode, Data: sec.Data[e.Key]})
	}
	return spec, true, nil
}

// mountWorkspace links the workspace mount path (and the local server's
// workspace) to the PVC's directory, creating it from its snapshot source
// on first use.
func (k *Kubelet) mountWorkspace(ctx context.Context, pod *corev1.Pod) error {
	var claim, mountPath string
	for _, v := range pod.Spec.Volumes {
		if v.Name == "workspace" && v.PersistentVolumeClaim != nil {
			claim = v.PersistentVolumeClaim.ClaimName
		}
	}
	for _, m := range pod.Spec.Containers[0].VolumeMounts {
		if m.Name == "workspace" {
			mountPath = m.MountPath
		}
	}
	vol := filepath.Join(k.dir, "volumes", pod.Name)
	if claim != "" {
		pvc, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).Get(ctx, claim, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("pvc %s: %w", claim, err)
		}
		vol = filepath.Join(k.dir, "volumes", claim)
		if _, err := os.Stat(vol); errors.Is(err, os.ErrNotExist) {
			if ds := pvc.Spec.DataSource; ds != nil && ds.Kind == "VolumeSnapshot" {
				if err := os.CopyFS(vol, os.DirFS(filepath.Join(k.dir, "snapshots", ds.Name))); err != nil {
					return fmt.Errorf("restore pvc %s from %s: %w", claim, ds.Name, err)
				}
			}
		}
	}
	if err := os.MkdirAll(vol, 0o755); err != nil {
		return err
	}
	links := []string{filepath.Join(k.dir, "local", "sandboxes", pod.Name, "workspace")}
	if mountPath != "" {
		links = append(links, mountPath)
	}
	for _, l := range links {
		if err := os.MkdirAll(filepath.Dir(l), 0o700); err != nil {
			return err
		}
		_ = os.Remove(l)
		if err := os.Symlink(vol, l); err != nil {
			return err
		}
	}
	return nil
}

// syncSnapshots takes each new snapshot (a copy of its PVC's directory) and
// marks it ready to use.
func (k *Kubelet) syncSnapshots(ctx context.Context) error {
	res := k.dyn.Resource(k8s.SnapshotGVR).Namespace(k.ns)
	list, err := res.List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		s := &list.Items[i]
		if ready, _, _ := unstructured.NestedBool(s.Object, "status", "readyToUse"); ready {
			continue
		}
		pvc, _, _ := unstructured.NestedString(s.Object, "spec", "source", "persistentVolumeClaimName")
		dst := filepath.Join(k.dir, "snapshots", s.GetName())
		_ = os.RemoveAll(dst)
		if err := os.CopyFS(dst, os.DirFS(filepath.Join(k.dir, "volumes", pvc))); err != nil {
			return fmt.Errorf("snapshot %s of %s: %w", s.GetName(), pvc, err)
		}
		if err := unstructured.SetNestedField(s.Object, true, "status", "readyToUse"); err != nil {
			return err
		}
		if _, err := res.UpdateStatus(ctx, s, metav1.UpdateOptions{}); ignoreGone(err) != nil {
			return fmt.Errorf("mark snapshot %s ready: %w", s.GetName(), err)
		}
	}
	return nil
}

// stopDeleted stops the servers of pods the watch saw deleted, unless the
// name already serves a successor (a different IP; "" matches any).
func (k *Kubelet) stopDeleted(ctx context.Context) {
	k.mu.Lock()
	var stale []string
	for name, ip := range k.deleted {
		if r := k.pods[name]; r == nil || ip == "" || r.ip == ip {
			stale = append(stale, name)
		}
	}
	clear(k.deleted)
	k.mu.Unlock()
	for _, name := range stale {
		k.stop(ctx, name, true)
	}
}

// stop ends a pod's server; with forget it also drops the local server's
// files (the pod is gone).
func (k *Kubelet) stop(ctx context.Context, name string, forget bool) {
	k.mu.Lock()
	r := k.pods[name]
	if forget {
		delete(k.pods, name)
	}
	k.mu.Unlock()
	if r != nil && r.ln != nil {
		r.ln.Close()
	}
	_ = k.local.Destroy(ctx, name)
}

// releaseClaims does the pvc-protection controller's part: a PVC being
// deleted keeps its kubernetes.io/pvc-protection finalizer while a pod
// uses it and loses it once none does, and only then is it gone.
func (k *Kubelet) releaseClaims(ctx context.Context, pods []corev1.Pod) error {
	used := map[string]bool{}
	for i := range pods {
		for _, v := range pods[i].Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				used[v.PersistentVolumeClaim.ClaimName] = true
			}
		}
	}
	claims, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		if c.DeletionTimestamp == nil || used[c.Name] || !slices.Contains(c.Finalizers, pvcProtection) {
			continue
		}
		c = c.DeepCopy()
		c.Finalizers = slices.DeleteFunc(c.Finalizers, func(f string) bool { return f == pvcProtection })
		if _, err := k.client.CoreV1().PersistentVolumeClaims(k.ns).Update(ctx, c, metav1.UpdateOptions{}); ignoreGone(err) != nil {
			return fmt.Errorf("release pvc %s: %w", c.Name, err)
		}
	}
	return nil
}

const pvcProtection = "kubernetes.io/pvc-protection"

func ignoreGone(err error) error {
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil
	}
	return err
}
