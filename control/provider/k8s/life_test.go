package k8s_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/k8s/k8stest"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// replica is one control replica: its own store connection pool, provider
// and lifecycle manager, sharing the database and the (fake) cluster.
type replica struct {
	st   *postgres.Store
	prov *k8s.Provider
	m    *lifecycle.Manager
}

var testAccount = store.Account{ID: "acct-test", Name: "test", SandboxesEnabled: true, ConcurrentLimit: 100}

// newReplica opens a store on dbURL, a provider on e's clients and a
// manager over both. watch subscribes the manager to pod stops and starts
// the provider's informer; jobs works the job queue.
func newReplica(t *testing.T, e *env, dbURL string, watch, jobs bool) *replica {
	t.Helper()
	return newReplicaCfg(t, e, dbURL, watch, jobs, lifecycle.Config{}, lifecycle.Deps{})
}

// newReplicaCfg is newReplica with a lifecycle config and the optional
// lifecycle deps (Activity) set.
func newReplicaCfg(t *testing.T, e *env, dbURL string, watch, jobs bool, lc lifecycle.Config, extra lifecycle.Deps) *replica {
	t.Helper()
	ctx := ctxT(t)
	st, err := postgres.Open(ctx, dbURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	prov, err := k8s.New(k8s.Config{
		Namespace: e.ns, Catalog: e.catalog, SSHPort: e.kubelet.SSHPort(), ForwardPort: e.kubelet.ForwardPort(), WorkspaceDir: e.kubelet.WorkspaceDir(),
		PollInterval: 20 * time.Millisecond, ReadyTimeout: testReadyTimeout, ReplenishInterval: 100 * time.Millisecond,
	}, k8s.Deps{Client: e.ctl.Client, Dynamic: e.ctl.Dynamic, Warm: st})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{st: st, prov: prov}
	r.m = lifecycle.New(lc, lifecycle.Deps{
		Store: st, Provider: prov, HostKeys: e.keys, UserCAKey: e.ca.AuthorizedKey(), Activity: extra.Activity,
	})
	err = st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertAccount(ctx, testAccount); err != nil {
			return err
		}
		for _, s := range e.catalog.Profiles {
			p := store.Profile{Name: s.Name, Platform: s.Platform, CPU: s.CPU, MemoryMB: s.MemoryMB, DiskGB: s.DiskGB, Image: s.Image}
			if err := tx.UpsertProfile(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if watch {
		if !r.m.WatchStops() {
			t.Fatal("k8s provider does not report pod stops")
		}
		if err := prov.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { prov.Close() })
	}
	if jobs {
		cfg := r.m.Jobs()
		cfg.RetryPolicy = fastRetry{}
		if err := st.StartJobs(ctx, cfg); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = st.StopJobs(sctx)
		})
	}
	return r
}

type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time {
	return time.Now().Add(100 * time.Millisecond)
}

func waitState(t *testing.T, st store.Store, id string, want ...store.State) store.Sandbox {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		sb, err := st.Sandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range want {
			if sb.State == w {
				return sb
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s in %s; want %v", id, sb.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func create(t *testing.T, m *lifecycle.Manager, profile string) store.Sandbox {
	t.Helper()
	sb, _, err := m.Create(ctxT(t), testAccount, lifecycle.CreateRequest{Profile: profile})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// TestPodWatcherClosesSessionOnce ends ready sandboxes' pods in every way
// the watcher tells apart, with two control replicas watching. Each
// sandbox's compute session closes once, at the pod's finish time, with
// the pod's reason, and one terminating event is written.
func TestPodWatcherClosesSessionOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	db := testdb.Postgres(t)
	r1 := newReplica(t, e, db, true, true)
	newReplica(t, e, db, true, false)

	// The finish time is set once all are ready: a stop before ready_at
	// is clamped to ready_at (a skewed node clock), not tested here.
	var fin time.Time
	cases := []struct {
		term k8stest.Termination
		want string
	}{
		{k8stest.Termination{ContainerReason: "OOMKilled", ExitCode: 137}, k8s.ReasonOOMKilled},
		{k8stest.Termination{PodReason: "Evicted"}, k8s.ReasonEvicted},
		{k8stest.Termination{PodReason: "NodeLost"}, k8s.ReasonNodeLoss},
		{k8stest.Termination{ContainerReason: "Error", ExitCode: 2}, k8s.ReasonGuestCrash},
		{k8stest.Termination{}, k8s.ReasonError},
	}
	ids := make([]string, len(cases))
	for i := range cases {
		ids[i] = create(t, r1.m, "tuist-linux-medium").ID
	}
	skewed := create(t, r1.m, "tuist-linux-medium").ID
	for i := range cases {
		waitState(t, r1.st, ids[i], store.StateReady)
	}
	// A node clock behind ours reports a finish before ready_at: the
	// session closes at ready_at, never with a negative length.
	readyAt := *waitState(t, r1.st, skewed, store.StateReady).ReadyAt
	if err := e.kubelet.Fail(ctxT(t), skewed, k8stest.Termination{PodReason: "Evicted", FinishedAt: readyAt.Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	waitState(t, r1.st, skewed, store.StateTerminating, store.StateTerminated)
	if s, _ := r1.st.Sessions(context.Background(), skewed); len(s) != 1 || s[0].EndedAt == nil || !s[0].EndedAt.Equal(readyAt) {
		t.Errorf("skewed stop: sessions %+v; want one closed at ready_at %v", s, readyAt)
	}
	// Kubernetes keeps times to the second (metav1.Time's RFC 3339).
	fin = time.Now().UTC().Add(time.Second).Truncate(time.Second)
	for i, c := range cases {
		c.term.FinishedAt = fin
		if err := e.kubelet.Fail(ctxT(t), ids[i], c.term); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			s := endedOnce(t, r1.st, ids[i], c.want)
			if !s.EndedAt.Equal(fin) {
				t.Errorf("session ended %v; want %v", s.EndedAt, fin)
			}
		})
	}
}

// endedOnce waits for sandbox id to end and checks it ended once, with
// reason: one closed session, one terminating event, however many
// watchers saw the stop. It returns the session.
func endedOnce(t *testing.T, st store.Store, id, reason string) store.Session {
	t.Helper()
	sb := waitState(t, st, id, store.StateTerminating, store.StateTerminated)
	if sb.EndReason != reason {
		t.Errorf("%s: end reason %q, want %q", id, sb.EndReason, reason)
	}
	sessions, err := st.Sessions(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if len(sessions) != 1 || sessions[0].EndedAt == nil {
		t.Fatalf("%s: sessions %+v; want one closed", id, sessions)
	}
	if sessions[0].EndReason != reason {
		t.Errorf("%s: session end reason %q, want %q", id, sessions[0].EndReason, reason)
	}
	events, err := st.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, ev := range events {
		if ev.State == store.StateTerminating {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%s: %d terminating events; want 1 (events %+v)", id, n, events)
	}
	return sessions[0]
}

// TestReconcileOrphans: at start, a pod with no sandbox row is deleted and
// a ready sandbox whose pod vanished is ended with its session closed.
func TestReconcileOrphans(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	r := newReplica(t, e, testdb.Postgres(t), false, true)
	sb := create(t, r.m, "tuist-linux-medium")
	waitState(t, r.st, sb.ID, store.StateReady)
	if _, err := e.prov.Provision(ctx, e.spec(t, "sbx-orphan", "tuist-linux-medium")); err != nil {
		t.Fatal(err)
	}
	if err := e.client.CoreV1().Pods(e.ns).Delete(ctx, sb.ID, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.m.Reconcile(ctx); err != nil {
		t.Fatal(err)
	}
	if p, c, s, _ := count(t, e, "sbx-orphan"); p+c+s != 0 {
		t.Errorf("orphan left %d pods, %d pvcs, %d secrets; want none", p, c, s)
	}
	got := waitState(t, r.st, sb.ID, store.StateTerminating, store.StateTerminated)
	if got.EndReason != lifecycle.ReasonPodVanished {
		t.Errorf("end reason %q, want %q", got.EndReason, lifecycle.ReasonPodVanished)
	}
	sessions, _ := r.st.Sessions(ctx, sb.ID)
	if len(sessions) != 1 || sessions[0].EndedAt == nil {
		t.Errorf("sessions %+v; want one closed", sessions)
	}
}

// TestWarmClaimParallel fills a warm pool of 20 and creates 25 sandboxes
// at once on two replicas: 20 get distinct warm pods, each answering with
// its own sandbox's host key, 5 cold boot, and the pool refills.
func TestWarmClaimParallel(t *testing.T) {
	t.Parallel()
	const warm, creates = 20, 25
	e := newEnv(t, nil)
	for i := range e.catalog.Profiles {
		if e.catalog.Profiles[i].Name == "tuist-linux-warm" {
			e.catalog.Profiles[i].WarmReplicas = warm
		}
	}
	db := testdb.Postgres(t)
	r1 := newReplica(t, e, db, true, false)
	r2 := newReplica(t, e, db, true, false)
	waitWarm(t, r1.st, warm)

	ctx := ctxT(t)
	type result struct {
		id, pod, boot string
		err           error
	}
	results := make(chan result, creates)
	for i := range creates {
		r := []*replica{r1, r2}[i%2]
		go func() {
			id := fmt.Sprintf("sbx-warm-%02d", i)
			ep, err := r.prov.Provision(ctx, e.spec(t, id, "tuist-linux-warm"))
			res := result{id: id, boot: ep.Boot, err: err}
			if err == nil {
				pods, _ := e.client.CoreV1().Pods(e.ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelSandbox + "=" + id})
				if len(pods.Items) == 1 {
					res.pod = pods.Items[0].Name
				}
			}
			results <- res
		}()
	}
	owner := map[string]string{}
	hits := 0
	for range creates {
		res := <-results
		if res.err != nil {
			t.Errorf("provision %s: %v", res.id, res.err)
			continue
		}
		if prev, ok := owner[res.pod]; ok || res.pod == "" {
			t.Errorf("pod %q of %s also claimed by %q", res.pod, res.id, prev)
		}
		owner[res.pod] = res.id
		if res.boot == k8s.BootWarm {
			hits++
		}
	}
	if hits != warm {
		t.Errorf("%d warm hits; want %d (the rest cold boot)", hits, warm)
	}
	rows, err := r1.st.WarmPods(ctx)
	if err != nil {
		t.Fatal(err)
	}
	claimedBy := map[string]bool{}
	for _, w := range rows {
		if w.ClaimedBy != "" {
			if claimedBy[w.ClaimedBy] {
				t.Errorf("sandbox %s holds two warm rows", w.ClaimedBy)
			}
			claimedBy[w.ClaimedBy] = true
		}
	}
	if len(claimedBy) != warm {
		t.Errorf("%d claimed rows; want %d", len(claimedBy), warm)
	}
	waitWarm(t, r1.st, warm) // replenished in the background
}

// waitWarm waits until n unclaimed warm pods are recorded.
func waitWarm(t *testing.T, st *postgres.Store, n int) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for {
		rows, err := st.WarmPods(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		free := 0
		for _, w := range rows {
			if w.ClaimedBy == "" {
				free++
			}
		}
		if free == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d free warm pods; want %d", free, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIdleSkipsMacOS: the idle detector suspends an idle Linux sandbox
// through a VolumeSnapshot but leaves an idle macOS sandbox ready (no
// macOS suspend in v1), with its compute session still open.
func TestIdleSkipsMacOS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, nil)
	ctx := ctxT(t)
	act := memstore.New(nil)
	r := newReplicaCfg(t, e, testdb.Postgres(t), false, true,
		lifecycle.Config{IdleTimeout: time.Second}, lifecycle.Deps{Activity: act})
	linux := create(t, r.m, "tuist-linux-medium")
	mac := create(t, r.m, "tuist-macos-16-large")
	waitState(t, r.st, linux.ID, store.StateReady)
	waitState(t, r.st, mac.ID, store.StateReady)
	time.Sleep(1100 * time.Millisecond) // both idle past the timeout
	if err := r.m.CheckIdle(ctx); err != nil {
		t.Fatal(err)
	}
	waitState(t, r.st, linux.ID, store.StateSuspended)
	if sb, _ := r.st.Sandbox(ctx, mac.ID); sb.State != store.StateReady {
		t.Errorf("idle macOS sandbox in %s; want ready", sb.State)
	}
	sessions, _ := r.st.Sessions(ctx, mac.ID)
	if len(sessions) != 1 || sessions[0].EndedAt != nil {
		t.Errorf("macOS sessions %+v; want one open compute session", sessions)
	}
}
