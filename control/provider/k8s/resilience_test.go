package k8s_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/kubetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestAPIServerRestart restarts kube-apiserver under two control replicas
// watching pods. A pod that fails just before the restart (its event may
// be lost with the broken watch, then seen in the relist) and one that
// fails after it each end their sandbox once: one terminating event, one
// closed session. A create after the restart reaches ready. The cluster is
// the test's own: the restart must not disturb other tests.
func TestAPIServerRestart(t *testing.T) {
	t.Parallel()
	kubetest.Shared(t) // skips (or fails) as the other tests do without binaries
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	api, err := kubetest.Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(api.Stop)
	e := newEnvIn(t, k8stest.NewClusterOn(t, api), nil)
	db := testdb.Postgres(t)
	r1 := newReplica(t, e, db, true, true)
	newReplica(t, e, db, true, false)

	before := create(t, r1.m, "tuist-linux-medium").ID
	after := create(t, r1.m, "tuist-linux-medium").ID
	waitState(t, r1.st, before, store.StateReady)
	waitState(t, r1.st, after, store.StateReady)

	if err := e.kubelet.Fail(ctx, before, k8stest.Termination{ContainerReason: "OOMKilled", ExitCode: 137, FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if err := api.RestartAPIServer(ctx, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := e.kubelet.Fail(ctx, after, k8stest.Termination{PodReason: "Evicted", FinishedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	third := create(t, r1.m, "tuist-linux-medium").ID

	for id, reason := range map[string]string{before: k8s.ReasonOOMKilled, after: k8s.ReasonEvicted} {
		waitState(t, r1.st, id, store.StateTerminating, store.StateTerminated)
		// Both replicas' watchers saw the stop, maybe twice (event and
		// relist): give a late duplicate time to land before counting.
		time.Sleep(500 * time.Millisecond)
		endedOnce(t, r1.st, id, reason)
	}
	waitState(t, r1.st, third, store.StateReady)
}

// TestSecretUpdateConflict re-provisions over a Secret left by a crash
// while another writer changes that Secret between the provider's read and
// its update: the apiserver answers 409 Conflict, the provider reads again
// and writes its data without dropping the other writer's label.
func TestSecretUpdateConflict(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	const id = "sbx-conflict"
	left := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: id + "-ssh", Namespace: e.ns}}
	if _, err := e.client.CoreV1().Secrets(e.ns).Create(ctx, left, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	e.ctl.OnRequest(func(req *http.Request) {
		if req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/secrets/"+id+"-ssh") {
			return
		}
		once.Do(func() {
			patch := []byte(`{"metadata":{"labels":{"ops.example/keep":"yes"}}}`)
			if _, err := e.client.CoreV1().Secrets(e.ns).Patch(ctx, id+"-ssh", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				t.Errorf("concurrent write: %v", err)
			}
		})
	})
	if _, err := e.prov.Provision(ctx, e.spec(t, id, "tuist-linux-medium")); err != nil {
		t.Fatal(err)
	}
	var puts []int
	for _, c := range e.ctl.Calls() {
		if c.Resource == "secrets" && c.Verb == "update" {
			puts = append(puts, c.Status)
		}
	}
	if len(puts) != 2 || puts[0] != http.StatusConflict || puts[1] != http.StatusOK {
		t.Errorf("secret updates answered %v; want [409 200]", puts)
	}
	sec, err := e.client.CoreV1().Secrets(e.ns).Get(ctx, id+"-ssh", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(sec.Data["host_key"]) == 0 {
		t.Error("secret has no host key after the retried update")
	}
	if sec.Labels["ops.example/keep"] != "yes" {
		t.Errorf("the other writer's label was dropped: %v", sec.Labels)
	}
	if sec.Labels[k8s.LabelSandbox] != id {
		t.Errorf("secret labels %v; want the sandbox label", sec.Labels)
	}
}
