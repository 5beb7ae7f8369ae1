package k8s_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/internal/podssh"
)

func count(t *testing.T, e *env, id string) (pods, pvcs, secrets, snaps int) {
	t.Helper()
	ctx := ctxT(t)
	sel := metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + id}
	pl, err := e.client.CoreV1().Pods(e.ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	cl, _ := e.client.CoreV1().PersistentVolumeClaims(e.ns).List(ctx, sel)
	sl, _ := e.client.CoreV1().Secrets(e.ns).List(ctx, sel)
	vl, err := e.dyn.Resource(k8s.SnapshotGVR).Namespace(e.ns).List(ctx, sel)
	if err != nil {
		t.Fatal(err)
	}
	// An object being deleted is gone as far as the provider is
	// concerned: a PVC waits on the pvc-protection finalizer until the
	// (test) kubelet releases it, as a real cluster's controller does.
	live := func(n int, deleting func(int) bool) int {
		c := 0
		for i := range n {
			if !deleting(i) {
				c++
			}
		}
		return c
	}
	return live(len(pl.Items), func(i int) bool { return pl.Items[i].DeletionTimestamp != nil }),
		live(len(cl.Items), func(i int) bool { return cl.Items[i].DeletionTimestamp != nil }),
		live(len(sl.Items), func(i int) bool { return sl.Items[i].DeletionTimestamp != nil }),
		live(len(vl.Items), func(i int) bool { return vl.Items[i].GetDeletionTimestamp() != nil })
}

// TestColdBootToReady provisions through the kubelet: the endpoint is the
// pod's IP, the pinned host key answers there, files land in the home, a
// repeated Provision reuses the pod, Destroy removes every object.
func TestColdBootToReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	spec := e.spec(t, "sbx-cold", "tuist-linux-medium")
	ep, err := e.prov.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if ep.Boot != k8s.BootCold || ep.User != k8s.SandboxUser {
		t.Errorf("endpoint %+v: want cold_boot as %s", ep, k8s.SandboxUser)
	}
	pod, err := e.client.CoreV1().Pods(e.ns).Get(ctx, "sbx-cold", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := pod.Status.PodIP; filepath.Dir(ep.Addr) == "" || ep.Addr[:len(want)] != want {
		t.Errorf("endpoint %s is not on the pod IP %s", ep.Addr, want)
	}
	_, pub, _ := e.keys.Key("sbx-cold")
	pinned := parseAuthorized(t, pub)
	if err := podssh.ProbeHostKey(ctx, ep.Addr, pinned); err != nil {
		t.Errorf("pinned host key probe: %v", err)
	}
	_, other, _ := e.keys.Key("sbx-other")
	if err := podssh.ProbeHostKey(ctx, ep.Addr, parseAuthorized(t, other)); err == nil {
		t.Error("probe with another sandbox's key succeeded; want a mismatch")
	}
	if host, _, _ := net.SplitHostPort(ep.ForwardAddr); host != pod.Status.PodIP {
		t.Errorf("forward address %q is not on the pod IP %s", ep.ForwardAddr, pod.Status.PodIP)
	}
	e.checkForward(t, ep, "sbx-cold")
	// The grant file reached the pod's home through the Secret, and the
	// pod's init is PID 1 of the pod.
	pool := podssh.NewPool(e.ca, nil)
	defer pool.Close()
	target := podssh.Target{SandboxID: "sbx-cold", Addr: ep.Addr, User: ep.User, HostKey: pub, Workspace: ep.Workspace}
	res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: "cat ~/.config/sbx/grants/p1.token; echo; tr '\\0' ' ' </proc/1/cmdline"})
	if err != nil || !strings.HasPrefix(string(res.Stdout), "grant-token\n") || !strings.Contains(string(res.Stdout), "sbx-init") {
		t.Errorf("grant file and PID 1: %q, %v; want grant-token and sbx-init", res.Stdout, err)
	}
	in, err := e.prov.Status(ctx, "sbx-cold")
	if err != nil || in.Phase != provider.PhaseRunning || in.Endpoint.Addr != ep.Addr {
		t.Errorf("status %+v, %v; want running at %s", in, err, ep.Addr)
	}
	again, err := e.prov.Provision(ctx, spec)
	if err != nil || again.Addr != ep.Addr {
		t.Errorf("second provision %+v, %v; want the same pod at %s", again, err, ep.Addr)
	}
	list, err := e.prov.List(ctx)
	if err != nil || len(list) != 1 || list[0].SandboxID != "sbx-cold" {
		t.Errorf("list %+v, %v; want sbx-cold only", list, err)
	}
	if err := e.prov.Destroy(ctx, "sbx-cold"); err != nil {
		t.Fatal(err)
	}
	if p, c, s, v := count(t, e, "sbx-cold"); p+c+s+v != 0 {
		t.Errorf("after destroy: %d pods, %d pvcs, %d secrets, %d snapshots; want none", p, c, s, v)
	}
	if _, err := e.prov.Status(ctx, "sbx-cold"); !errors.Is(err, provider.ErrNotFound) {
		t.Errorf("status after destroy: %v; want ErrNotFound", err)
	}
	if err := e.prov.Destroy(ctx, "sbx-cold"); err != nil {
		t.Errorf("second destroy: %v", err)
	}
}

// TestInitExitEndsPod: when the pod's init ends on its own (here asked
// to from inside the sandbox), the pod is Succeeded with its exit code,
// as restartPolicy Never leaves it, and the provider reports it stopped.
func TestInitExitEndsPod(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	ep, err := e.prov.Provision(ctx, e.spec(t, "sbx-exit", "tuist-linux-medium"))
	if err != nil {
		t.Fatal(err)
	}
	_, pub, _ := e.keys.Key("sbx-exit")
	pool := podssh.NewPool(e.ca, nil)
	defer pool.Close()
	// PID 1 forwards SIGTERM to the init proper, which stops sshd too:
	// the session may end before it answers.
	_, _ = pool.Exec(ctx, podssh.Target{SandboxID: "sbx-exit", Addr: ep.Addr, User: ep.User, HostKey: pub}, podssh.ExecRequest{Command: "kill -TERM 1"})
	var pod *corev1.Pod
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if pod, err = e.client.CoreV1().Pods(e.ns).Get(ctx, "sbx-exit", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
			break
		}
	}
	if pod.Status.Phase != corev1.PodSucceeded || len(pod.Status.ContainerStatuses) != 1 ||
		pod.Status.ContainerStatuses[0].State.Terminated == nil || pod.Status.ContainerStatuses[0].State.Terminated.ExitCode != 0 {
		t.Fatalf("pod after its init exited: %s %+v; want Succeeded, exit code 0", pod.Status.Phase, pod.Status.ContainerStatuses)
	}
	if in, err := e.prov.Status(ctx, "sbx-exit"); err != nil || in.Phase == provider.PhaseRunning {
		t.Errorf("provider status %+v, %v; want the sandbox not running", in, err)
	}
}

// TestSuspendRestore goes through VolumeSnapshot objects: the workspace
// survives, pod and PVC are released while suspended, the snapshot goes
// with the sandbox.
func TestSuspendRestore(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	spec := e.spec(t, "sbx-susp", "tuist-linux-medium")
	ep, err := e.prov.Provision(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ep.Workspace, "keep.txt"), []byte("state"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := e.prov.Suspend(ctx, "sbx-susp"); err != nil {
		t.Fatal(err)
	}
	p, c, s, v := count(t, e, "sbx-susp")
	if p != 0 || c != 0 || s != 0 || v != 1 {
		t.Fatalf("suspended: %d pods, %d pvcs, %d secrets, %d snapshots; want only 1 snapshot", p, c, s, v)
	}
	snaps, _ := e.dyn.Resource(k8s.SnapshotGVR).Namespace(e.ns).List(ctx, metav1.ListOptions{})
	snap := snaps.Items[0]
	src, _, _ := unstructured.NestedString(snap.Object, "spec", "source", "persistentVolumeClaimName")
	class, _, _ := unstructured.NestedString(snap.Object, "spec", "volumeSnapshotClassName")
	if src != "sbx-susp-ws" || class != "fast-snap" {
		t.Errorf("snapshot source %q class %q; want sbx-susp-ws, fast-snap", src, class)
	}
	if in, err := e.prov.Status(ctx, "sbx-susp"); err != nil || in.Phase != provider.PhaseStopped {
		t.Errorf("status while suspended %+v, %v; want stopped", in, err)
	}
	if err := e.prov.Suspend(ctx, "sbx-susp"); err != nil {
		t.Errorf("second suspend: %v", err)
	}
	ep2, err := e.prov.Restore(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if ep2.Boot == k8s.BootWarm {
		t.Error("restore used the warm pool")
	}
	pvc, err := e.client.CoreV1().PersistentVolumeClaims(e.ns).Get(ctx, "sbx-susp-ws", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds := pvc.Spec.DataSource; ds == nil || ds.Kind != "VolumeSnapshot" || ds.Name != snap.GetName() {
		t.Errorf("restored pvc data source %+v; want VolumeSnapshot %s", ds, snap.GetName())
	}
	if b, err := os.ReadFile(filepath.Join(ep2.Workspace, "keep.txt")); err != nil || string(b) != "state" {
		t.Errorf("workspace after restore: %q, %v; want state", b, err)
	}
	// A second suspend replaces the first snapshot.
	if err := e.prov.Suspend(ctx, "sbx-susp"); err != nil {
		t.Fatal(err)
	}
	if _, _, _, v := count(t, e, "sbx-susp"); v != 1 {
		t.Errorf("after second suspend %d snapshots; want 1", v)
	}
	// A snapshot deleted behind the provider's back is gone for good.
	snaps, _ = e.dyn.Resource(k8s.SnapshotGVR).Namespace(e.ns).List(ctx, metav1.ListOptions{})
	for _, s := range snaps.Items {
		if err := e.dyn.Resource(k8s.SnapshotGVR).Namespace(e.ns).Delete(ctx, s.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.prov.Restore(ctx, spec); !errors.Is(err, provider.ErrSnapshotGone) {
		t.Errorf("restore without a snapshot: %v; want ErrSnapshotGone", err)
	}
	if err := e.prov.Destroy(ctx, "sbx-susp"); err != nil {
		t.Fatal(err)
	}
	if p, c, s, v := count(t, e, "sbx-susp"); p+c+s+v != 0 {
		t.Errorf("after destroy: %d pods, %d pvcs, %d secrets, %d snapshots; want none", p, c, s, v)
	}
}

// TestMacOSNoSuspend: macOS pods have no PVC and cannot be suspended in v1.
func TestMacOSNoSuspend(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	if _, err := e.prov.Provision(ctx, e.spec(t, "sbx-mac", "tuist-macos-16-large")); err != nil {
		t.Fatal(err)
	}
	if err := e.prov.Suspend(ctx, "sbx-mac"); !errors.Is(err, provider.ErrSuspendUnsupported) {
		t.Errorf("suspend macOS: %v; want ErrSuspendUnsupported", err)
	}
	if p, c, _, v := count(t, e, "sbx-mac"); p != 1 || c != 0 || v != 0 {
		t.Errorf("macOS sandbox: %d pods, %d pvcs, %d snapshots; want 1 pod, nothing else", p, c, v)
	}
}

func TestStopReason(t *testing.T) {
	t.Parallel()
	fin := time.Date(2026, 11, 21, 10, 0, 0, 0, time.UTC)
	term := func(reason string, code int32) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{
			Reason: reason, ExitCode: code, FinishedAt: metav1.NewTime(fin)}}}}
	}
	cases := []struct {
		name   string
		status corev1.PodStatus
		want   string
	}{
		{"oom", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("OOMKilled", 137)}, k8s.ReasonOOMKilled},
		{"evicted", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted"}, k8s.ReasonEvicted},
		{"node lost", corev1.PodStatus{Phase: corev1.PodFailed, Reason: "NodeLost"}, k8s.ReasonNodeLoss},
		{"taint manager", corev1.PodStatus{Phase: corev1.PodFailed, Conditions: []corev1.PodCondition{{
			Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue, Reason: "DeletionByTaintManager"}}}, k8s.ReasonNodeLoss},
		{"guest exit", corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("Error", 1)}, k8s.ReasonGuestCrash},
		{"guest clean exit", corev1.PodStatus{Phase: corev1.PodSucceeded, ContainerStatuses: term("Completed", 0)}, k8s.ReasonGuestCrash},
		{"nothing known", corev1.PodStatus{Phase: corev1.PodFailed}, k8s.ReasonError},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			pod := &corev1.Pod{Status: c.status}
			if got := k8s.StopReason(pod); got != c.want {
				t.Errorf("StopReason(%+v) = %q, want %q", c.status, got, c.want)
			}
		})
	}
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: term("OOMKilled", 137)}}
	if got := k8s.FinishedAt(pod); !got.Equal(fin) {
		t.Errorf("FinishedAt = %v, want %v", got, fin)
	}
}
