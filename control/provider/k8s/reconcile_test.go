package k8s_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestReconcileLoop runs checkReconcileLoop on the real apiserver.
func TestReconcileLoop(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	const every = 300 * time.Millisecond
	// No pod watcher: only the periodic reconcile can notice the
	// deletion. Jobs run, to provision and to tear down.
	r := newReplicaCfg(t, e, testdb.Postgres(t), false, true, lifecycle.Config{ReconcileInterval: every}, lifecycle.Deps{})
	checkReconcileLoop(t, r, e.client, e.ns, every)
}

// checkReconcileLoop: while control runs, a pod that carries our labels
// but no sandbox row owns is deleted, and a ready sandbox whose pod is
// deleted behind control's back ends with pod_vanished and its session
// closed, each within one reconcile interval (plus the pass itself). It
// reaches the cluster only through client and namespace, so the same
// check runs against a real kube-apiserver; the pod it creates passes the
// restricted Pod Security Standard.
func checkReconcileLoop(t *testing.T, r *replica, client kubernetes.Interface, namespace string, every time.Duration) {
	t.Helper()
	ctx := ctxT(t)
	sb := create(t, r.m, "tuist-linux-medium")
	waitState(t, r.st, sb.ID, store.StateReady)

	lctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		r.m.ReconcileEvery(lctx)
	}()
	t.Cleanup(func() { stop(); <-done })

	// A pass on the fake takes milliseconds; on a real apiserver, one
	// list of pods and one of snapshots. slack bounds it generously.
	const slack = 5 * time.Second
	stray := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "sbx-stray", Namespace: namespace, Labels: map[string]string{
			k8s.LabelManagedBy: "sbx-control", k8s.LabelRole: k8s.RoleSandbox, k8s.LabelSandbox: "sbx-stray",
		}},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "sandbox", Image: "registry.example/sbx/stray:1",
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
			}},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](1000),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	strayAt := time.Now()
	if _, err := client.CoreV1().Pods(namespace).Create(ctx, stray, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pods, err := client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + sb.ID})
	if err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods of %s: %d, %v; want 1", sb.ID, len(pods.Items), err)
	}
	vanishAt := time.Now()
	if err := client.CoreV1().Pods(namespace).Delete(ctx, pods.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	deadline := vanishAt.Add(every + slack)
	var strayGone, ended time.Duration
	for strayGone == 0 || ended == 0 {
		if strayGone == 0 {
			_, err := client.CoreV1().Pods(namespace).Get(ctx, stray.Name, metav1.GetOptions{})
			if err != nil {
				strayGone = time.Since(strayAt)
			}
		}
		if ended == 0 {
			cur, err := r.st.Sandbox(ctx, sb.ID)
			if err != nil {
				t.Fatal(err)
			}
			if cur.State != store.StateReady {
				ended = time.Since(vanishAt)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s (interval %s): stray pod deleted: %t, vanished sandbox ended: %t", every+slack, every, strayGone != 0, ended != 0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("interval %s: stray pod deleted after %s, vanished sandbox ended after %s", every, strayGone, ended)

	got := waitState(t, r.st, sb.ID, store.StateTerminating, store.StateTerminated)
	if got.EndReason != lifecycle.ReasonPodVanished {
		t.Errorf("end reason %q, want %q", got.EndReason, lifecycle.ReasonPodVanished)
	}
	sessions, err := r.st.Sessions(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || sessions[0].EndedAt == nil || sessions[0].EndReason != lifecycle.ReasonPodVanished {
		t.Errorf("sessions %+v; want one closed with %s", sessions, lifecycle.ReasonPodVanished)
	}
}
