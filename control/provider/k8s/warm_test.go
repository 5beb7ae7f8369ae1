package k8s_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/store/sqlite"
)

func freeRows(t testing.TB, st k8s.WarmStore) map[string]string {
	t.Helper()
	rows, err := st.WarmPods(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	free := map[string]string{}
	for _, w := range rows {
		if w.ClaimedBy == "" {
			free[w.Pod] = w.Image
		}
	}
	return free
}

// replenishUntil runs Replenish until the free rows satisfy ok.
func replenishUntil(t testing.TB, p *k8s.Provider, st k8s.WarmStore, what string, ok func(map[string]string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := p.Replenish(context.Background()); err != nil {
			t.Fatal(err)
		}
		free := freeRows(t, st)
		if ok(free) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("warm pool never reached %s: %v", what, free)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func countImages(free map[string]string, image string) int {
	n := 0
	for _, img := range free {
		if img == image {
			n++
		}
	}
	return n
}

// TestWarmImageRollAndRetire: after an image roll, warm pods of the old
// image serve until claimed and are replaced with the new image; a warm
// pod that vanished loses its row and is replaced; a profile no longer
// warm has its pods retired. On SQLite, the store of sbx dev.
func TestWarmImageRollAndRetire(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	st := openSQLite(t)
	const v1, v2 = "registry.example/sandbox-linux:v1", "registry.example/sandbox-linux:v2"
	withImage := func(image string, replicas int) *k8s.Provider {
		cat := loadCatalog(t)
		for i := range cat.Profiles {
			if cat.Profiles[i].Name == "tuist-linux-warm" {
				cat.Profiles[i].Image, cat.Profiles[i].WarmReplicas = image, replicas
			}
		}
		p, err := k8s.New(k8s.Config{
			Namespace: e.ns, Catalog: cat, SSHPort: e.kubelet.SSHPort(), ForwardPort: e.kubelet.ForwardPort(), WorkspaceDir: e.kubelet.WorkspaceDir(),
			PollInterval: 20 * time.Millisecond, ReadyTimeout: testReadyTimeout,
		}, k8s.Deps{Client: e.ctl.Client, Dynamic: e.ctl.Dynamic, Warm: st})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	p1 := withImage(v1, 2)
	replenishUntil(t, p1, st, "2 pods of v1", func(f map[string]string) bool { return countImages(f, v1) == 2 })

	p2 := withImage(v2, 2)
	if err := p2.Replenish(ctx); err != nil {
		t.Fatal(err)
	}
	if f := freeRows(t, st); countImages(f, v1) != 2 || len(f) != 2 {
		t.Fatalf("after the roll, before any claim: %v; want the 2 v1 pods still serving", f)
	}
	for i, id := range []string{"sbx-roll-a", "sbx-roll-b"} {
		spec := e.spec(t, id, "tuist-linux-warm")
		spec.Image = v2
		ep, err := p2.Provision(ctx, spec)
		if err != nil || ep.Boot != k8s.BootWarm {
			t.Fatalf("provision %s: %+v, %v; want a warm hit", id, ep, err)
		}
		want := i + 1
		replenishUntil(t, p2, st, "v2 replacements", func(f map[string]string) bool {
			return countImages(f, v2) == want && len(f) == 2
		})
	}
	if f := freeRows(t, st); countImages(f, v1) != 0 {
		t.Errorf("v1 warm pods left after two claims: %v", f)
	}

	// A free warm pod vanishes: its row goes and a new pod replaces it.
	var gone string
	for pod := range freeRows(t, st) {
		gone = pod
	}
	if err := e.client.CoreV1().Pods(e.ns).Delete(ctx, gone, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replenishUntil(t, p2, st, "a replacement", func(f map[string]string) bool {
		_, still := f[gone]
		return !still && len(f) == 2
	})

	// The profile stops being warm: its free pods are retired.
	p3 := withImage(v2, 0)
	if err := p3.Replenish(ctx); err != nil {
		t.Fatal(err)
	}
	if f := freeRows(t, st); len(f) != 0 {
		t.Errorf("free rows after warmReplicas 0: %v", f)
	}
	pods, _ := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelRole + "=" + k8s.RoleWarm})
	if len(pods.Items) != 0 {
		t.Errorf("%d warm pods left after warmReplicas 0", len(pods.Items))
	}
}

// TestCapacityGauges: desired slots are live sandbox pods plus the warm
// floor, available slots are capacity minus pods holding one.
func TestCapacityGauges(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	reg := prometheus.NewRegistry()
	p, err := k8s.New(k8s.Config{
		Namespace: e.ns, Catalog: e.catalog, SSHPort: e.kubelet.SSHPort(), ForwardPort: e.kubelet.ForwardPort(), WorkspaceDir: e.kubelet.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReplenishInterval: 20 * time.Millisecond,
	}, k8s.Deps{Client: e.ctl.Client, Dynamic: e.ctl.Dynamic, Metrics: k8s.NewMetrics(reg)})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"sbx-cap-1", "sbx-cap-2"} {
		if _, err := p.Provision(ctx, e.spec(t, id, "tuist-linux-medium")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := p.Provision(ctx, e.spec(t, "sbx-cap-mac", "tuist-macos-16-large")); err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	// The catalog keeps 2 warm linux pods (tuist-linux-warm); no warm
	// store here, so none run and only the floor counts as desired.
	// Every pod here is placed by the test kubelet: claimed, none queued.
	// The per-host slots are the defaults: the pool as one host for
	// Linux, Apple's two VMs for macOS.
	want := map[string]map[string]float64{
		"linux": {"sbx_pool_slots_capacity": 40, "sbx_pool_slots_desired": 2 + 2, "sbx_pool_slots_available": 40 - 2,
			"sbx_pool_slots_claimed": 2, "sbx_pool_slots_queued": 0, "sbx_pool_warm_floor": 2, "sbx_pool_slots_per_host": 40},
		"macos": {"sbx_pool_slots_capacity": 8, "sbx_pool_slots_desired": 1, "sbx_pool_slots_available": 8 - 1,
			"sbx_pool_slots_claimed": 1, "sbx_pool_slots_queued": 0, "sbx_pool_warm_floor": 0, "sbx_pool_slots_per_host": 2},
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := gauges(t, reg)
		match := true
		for pool, series := range want {
			for name, v := range series {
				if got[pool][name] != v {
					match = false
				}
			}
		}
		if match {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("gauges %v; want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func gauges(t *testing.T, reg *prometheus.Registry) map[string]map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" {
					if out[l.GetValue()] == nil {
						out[l.GetValue()] = map[string]float64{}
					}
					out[l.GetValue()][mf.GetName()] = m.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// TestWarmClaimResumes: a Provision cut off after claiming a warm pod, or
// after labelling it but before handing it the Secret, is completed by the
// retried Provision on the same pod.
func TestWarmClaimResumes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	st := openSQLite(t)
	p := e.warmProvider(t, st)
	replenishUntil(t, p, st, "2 warm pods", func(f map[string]string) bool { return len(f) == 2 })

	// Cut after the claim: nothing on the pod says whose it is yet.
	podA, err := st.ClaimWarmPod(ctx, "tuist-linux-warm", "sbx-cut-a")
	if err != nil || podA == "" {
		t.Fatalf("claim: %q, %v", podA, err)
	}
	// Cut after labelling: the pod is the sandbox's, its Secret is empty.
	podB, err := st.ClaimWarmPod(ctx, "tuist-linux-warm", "sbx-cut-b")
	if err != nil || podB == "" {
		t.Fatalf("claim: %q, %v", podB, err)
	}
	patch := []byte(`{"metadata":{"labels":{"` + k8s.LabelRole + `":"sandbox","` + k8s.LabelSandbox + `":"sbx-cut-b"}}}`)
	if _, err := e.client.CoreV1().Pods(e.ns).Patch(ctx, podB, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	for id, pod := range map[string]string{"sbx-cut-a": podA, "sbx-cut-b": podB} {
		ep, err := p.Provision(ctx, e.spec(t, id, "tuist-linux-warm"))
		if err != nil {
			t.Fatalf("retried provision of %s: %v", id, err)
		}
		// The warm pod's forwarder took the claimed sandbox's keys.
		e.checkForward(t, ep, id)
		got, err := e.client.CoreV1().Pods(e.ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil || got.Labels[k8s.LabelSandbox] != id {
			t.Errorf("pod %s labels %v, %v; want the claim's sandbox %s", pod, got.Labels, err, id)
		}
	}
}

// openSQLite opens a fresh SQLite store (the store of sbx dev), closed
// when the test ends.
func openSQLite(t testing.TB) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(ctxT(t), filepath.Join(t.TempDir(), "sbx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
