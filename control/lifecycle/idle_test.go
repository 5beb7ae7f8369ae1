package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/store"
)

// suspendProvider wraps the real local provider, counting restores and
// optionally failing suspends.
type suspendProvider struct {
	*local.Local
	restores    atomic.Int32
	failSuspend atomic.Bool
	// failProvision fails Provision (a server restart after a failed
	// suspend, say).
	failProvision atomic.Bool
	failRestores  atomic.Int32 // how many restores to fail before succeeding
	// restoreErr, when set, is what the failing restores return.
	restoreErr atomic.Pointer[error]
	// suspendGate and restoreGate, when set (see gate), hold Suspend and
	// Restore until the channel is closed or the call's context ends.
	suspendGate, restoreGate atomic.Pointer[chan struct{}]
}

// gate stores a fresh gate in g and returns what opens it, which the
// test's end calls too, so that a failed assertion never strands a job.
func gate(t *testing.T, g *atomic.Pointer[chan struct{}]) (release func()) {
	ch := make(chan struct{})
	g.Store(&ch)
	release = sync.OnceFunc(func() { close(ch) })
	t.Cleanup(release)
	return release
}

// waitGate waits for the gate in g, if one is set, to open.
func waitGate(ctx context.Context, g *atomic.Pointer[chan struct{}]) error {
	ch := g.Load()
	if ch == nil {
		return nil
	}
	select {
	case <-*ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *suspendProvider) Suspend(ctx context.Context, id string) error {
	if err := waitGate(ctx, &p.suspendGate); err != nil {
		return err
	}
	if p.failSuspend.Load() {
		return errors.New("injected: snapshot failed")
	}
	return p.Local.Suspend(ctx, id)
}

func (p *suspendProvider) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	if p.failProvision.Load() {
		return provider.Endpoint{}, errors.New("injected: server restart failed")
	}
	return p.Local.Provision(ctx, spec)
}

func (p *suspendProvider) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	p.restores.Add(1)
	if err := waitGate(ctx, &p.restoreGate); err != nil {
		return provider.Endpoint{}, err
	}
	if p.failRestores.Add(-1) >= 0 {
		if err := p.restoreErr.Load(); err != nil {
			return provider.Endpoint{}, *err
		}
		return provider.Endpoint{}, errors.New("injected: restore failed")
	}
	return p.Local.Restore(ctx, spec)
}

type idleHarness struct {
	*harness
	act  activity.Store
	prov *suspendProvider
	// forgetGate, when set (see gate), holds the lifecycle's Conns.Forget:
	// a restorer stalled after its restore, before it marks the sandbox ready.
	forgetGate atomic.Pointer[chan struct{}]
}

// gatedConns is the harness's pod connection pool: it holds nothing, and
// its Forget waits for h's forgetGate.
type gatedConns struct{ h *idleHarness }

func (c gatedConns) Forget(string) { _ = waitGate(context.Background(), &c.h.forgetGate) }

const idleTimeout = 5 * time.Minute

// stateCeiling bounds a wait for a state the idle machinery must reach. It
// is a hang detector, not a speed target: a loaded CI machine works the
// job queue slowly, and 10 s once proved too tight.
const stateCeiling = time.Minute

// newIdleHarness runs the lifecycle with an in-memory activity store on the
// harness clock and a 1 s idle tick; act replaces the store when non-nil.
func newIdleHarness(t *testing.T, backend string, act func(now func() time.Time) activity.Store, tune ...func(*lifecycle.Config)) *idleHarness {
	t.Helper()
	ih := &idleHarness{}
	cfg := lifecycle.Config{ReapInterval: time.Second, IdleTimeout: idleTimeout, IdleCheckInterval: time.Second}
	for _, f := range tune {
		f(&cfg)
	}
	ih.harness = newHarness(t, backend, cfg,
		func(p provider.Provider) provider.Provider {
			ih.prov = &suspendProvider{Local: p.(*local.Local)}
			return ih.prov
		},
		func(d *lifecycle.Deps) {
			if act == nil {
				act = func(now func() time.Time) activity.Store { return memstore.New(now) }
			}
			ih.act = act(d.Now)
			d.Activity = ih.act
			d.Conns = gatedConns{ih}
		})
	return ih
}

// readySandbox creates a sandbox, waits for ready and writes a file into
// its workspace.
func (h *idleHarness) readySandbox(t *testing.T) store.Sandbox {
	t.Helper()
	sb := h.create(t, 30)
	sb = h.waitState(t, sb.ID, store.StateReady, stateCeiling)
	if err := os.WriteFile(filepath.Join(sb.Workspace, "notes.txt"), []byte("kept across suspend\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return sb
}

// holds asserts id stays in want for d (several idle ticks).
func (h *idleHarness) holds(t *testing.T, id string, want store.State, d time.Duration) {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		sb, err := h.st.Sandbox(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != want {
			t.Fatalf("sandbox %s became %s, want it to stay %s", id, sb.State, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantSessions(t *testing.T, st store.Store, id string, want []string) []store.Session {
	t.Helper()
	ss, err := st.Sessions(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range ss {
		d := string(s.Kind) + ":"
		if s.EndedAt == nil {
			d += "open"
		} else {
			d += s.EndReason
		}
		got = append(got, d)
	}
	if len(got) != len(want) {
		t.Fatalf("ledger of %s: got %v, want %v", id, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("ledger of %s: got %v, want %v", id, got, want)
		}
	}
	return ss
}

// forBackends runs f as a parallel subtest of each backend, on a fresh
// idle harness tuned by tune.
func forBackends(t *testing.T, f func(t *testing.T, h *idleHarness), tune ...func(*lifecycle.Config)) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			f(t, newIdleHarness(t, backend, nil, tune...))
		})
	}
}

// TestIdleSuspendThenWake: an idle sandbox is suspended (compute line
// closed idle_offload, storage line open, workspace archived); 100
// concurrent wakers cause one restore, and the workspace comes back.
func TestIdleSuspendThenWake(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)
		if in, err := h.prov.Status(ctx, sb.ID); err != nil || sb.ForwardEndpoint == "" || sb.ForwardEndpoint != in.Endpoint.ForwardAddr {
			t.Fatalf("ready: forward endpoint %q, provider's %+v, %v; want the provider's, recorded", sb.ForwardEndpoint, in.Endpoint, err)
		}

		h.holds(t, sb.ID, store.StateReady, 2500*time.Millisecond) // not idle long enough yet
		h.clock.Advance(idleTimeout + time.Second)
		susp := h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		if susp.SuspendedAt == nil {
			t.Fatal("suspended sandbox has no suspended_at")
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:open"})
		if _, err := os.Stat(sb.Workspace); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("workspace still on disk while suspended: %v", err)
		}

		// A stale forward endpoint is replaced by the restore's.
		err := h.st.InTx(ctx, func(tx store.Tx) error {
			cur, err := tx.SandboxForUpdate(ctx, sb.ID)
			if err != nil {
				return err
			}
			cur.ForwardEndpoint = "127.0.0.1:1"
			return tx.UpdateSandbox(ctx, cur)
		})
		if err != nil {
			t.Fatal(err)
		}

		h.clock.Advance(10 * time.Minute) // time spent suspended
		var wg sync.WaitGroup
		errs := make(chan error, 100)
		for range 100 {
			wg.Go(func() {
				errs <- h.wake(sb.ID, 30*time.Second)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("wake: %v", err)
			}
		}
		if n := h.prov.restores.Load(); n != 1 {
			t.Fatalf("100 wakers caused %d restores, want 1", n)
		}
		woke, _ := h.st.Sandbox(ctx, sb.ID)
		if woke.State != store.StateReady || woke.SuspendedAt != nil {
			t.Fatalf("after wake: state %s suspended_at %v, want ready and none", woke.State, woke.SuspendedAt)
		}
		if in, err := h.prov.Status(ctx, sb.ID); err != nil || woke.ForwardEndpoint == "" || woke.ForwardEndpoint != in.Endpoint.ForwardAddr {
			t.Fatalf("after wake: forward endpoint %q, provider's %+v, %v; want the provider's, recorded", woke.ForwardEndpoint, in.Endpoint, err)
		}
		if moved := woke.DeadlineAt.Sub(sb.DeadlineAt); moved < 10*time.Minute {
			t.Fatalf("deadline moved by %v, want at least the 10m spent suspended", moved)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:restored", "compute:open"})
		got, err := os.ReadFile(filepath.Join(woke.Workspace, "notes.txt"))
		if err != nil || string(got) != "kept across suspend\n" {
			t.Fatalf("workspace file after wake: %q, %v", got, err)
		}

		// Again: every suspend and wake runs its own job.
		if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		if err := h.wake(sb.ID, 30*time.Second); err != nil {
			t.Fatalf("second wake: %v", err)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:restored", "compute:idle_offload", "storage:restored", "compute:open"})
	})
}

// TestLiveConnectionNeverSuspended: an open connection (ssh -N) keeps the
// sandbox ready however long it is quiet; once closed, idleness counts.
func TestLiveConnectionNeverSuspended(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", nil)
	sb := h.readySandbox(t)
	closeConn := h.act.Open(sb.ID)
	h.clock.Advance(3 * idleTimeout)
	h.holds(t, sb.ID, store.StateReady, 3*time.Second)
	closeConn()
	h.clock.Advance(idleTimeout + time.Second)
	h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
}

// TestNoIdleOffload: with offload turned off (control without the shared
// activity store) an idle sandbox stays ready.
func TestNoIdleOffload(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", nil, func(c *lifecycle.Config) { c.NoIdleOffload = true })
	if h.m.IdleOffload() {
		t.Fatal("IdleOffload() = true with NoIdleOffload set")
	}
	sb := h.readySandbox(t)
	h.clock.Advance(3 * idleTimeout)
	h.holds(t, sb.ID, store.StateReady, 3*time.Second)
}

// unreadable is an activity store whose reads fail, as Redis down.
type unreadable struct{ activity.Store }

func (unreadable) Status(context.Context, []string) (map[string]activity.Status, error) {
	return nil, errors.New("injected: redis unreachable")
}

// TestUnreadableActivitySuspendsNothing: the detector never suspends on
// missing data.
func TestUnreadableActivitySuspendsNothing(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", func(now func() time.Time) activity.Store {
		return unreadable{memstore.New(now)}
	})
	sb := h.readySandbox(t)
	h.clock.Advance(3 * idleTimeout)
	h.holds(t, sb.ID, store.StateReady, 3*time.Second)
}

// TestSuspendFailureReturnsToReady: a failed snapshot leaves the sandbox
// ready with its workspace, and the ledger says so.
func TestSuspendFailureReturnsToReady(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "postgres", nil)
	sb := h.readySandbox(t)
	h.prov.failSuspend.Store(true)
	if err := h.m.Suspend(context.Background(), sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	back := h.waitState(t, sb.ID, store.StateReady, stateCeiling)
	// The compute line never closed: billing continues while suspending
	// and a failed suspend is no exit from ready.
	wantSessions(t, h.st, sb.ID, []string{"compute:open"})
	if in, err := h.prov.Status(context.Background(), sb.ID); err != nil || in.Phase != provider.PhaseRunning {
		t.Fatalf("provider after failed suspend: %+v, %v; want running", in, err)
	}
	if _, err := os.Stat(filepath.Join(back.Workspace, "notes.txt")); err != nil {
		t.Fatalf("workspace lost by a failed suspend: %v", err)
	}
}

// TestSuspendedDeadlinePausedCapApplies: past its deadline a suspended
// sandbox stays suspended (the clock is paused); past the lifetime cap it
// ends, the storage line closes and the snapshot is deleted. DELETE while
// suspended does the same.
func TestSuspendedDeadlinePausedCapApplies(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		capped, deleted := h.readySandbox(t), h.readySandbox(t)
		for _, sb := range []store.Sandbox{capped, deleted} {
			if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		}
		if _, err := h.m.Delete(ctx, h.acct, deleted.ID); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, deleted.ID, store.StateTerminated, stateCeiling)
		wantSessions(t, h.st, deleted.ID, []string{"compute:idle_offload", "storage:explicit_delete"})

		h.clock.Advance(time.Hour) // past the 30-minute deadline
		h.holds(t, capped.ID, store.StateSuspended, 2500*time.Millisecond)
		h.clock.Advance(7 * 24 * time.Hour) // past the lifetime cap
		ended := h.waitState(t, capped.ID, store.StateTerminated, stateCeiling)
		if ended.EndReason != lifecycle.ReasonDeadline {
			t.Fatalf("end reason %q, want deadline", ended.EndReason)
		}
		wantSessions(t, h.st, capped.ID, []string{"compute:idle_offload", "storage:deadline"})
		for _, id := range []string{capped.ID, deleted.ID} {
			if in, err := h.prov.Status(ctx, id); err == nil && in.Phase != provider.PhaseNotFound {
				t.Fatalf("snapshot of %s survived its end (%s)", id, in.Phase)
			}
		}
		if err := h.m.Wake(ctx, capped.ID); !errors.Is(err, lifecycle.ErrCannotWake) {
			t.Fatalf("wake of an ended sandbox: %v, want ErrCannotWake", err)
		}
	})
}

// lossyActivity is an in-memory activity store that a test can make lose
// every record, as a Redis that restarts empty or is flushed, or a
// restarted `sbx dev`, does.
type lossyActivity struct {
	now func() time.Time
	cur atomic.Pointer[memstore.Store]
}

func newLossyActivity(now func() time.Time) *lossyActivity {
	l := &lossyActivity{now: now}
	l.lose()
	return l
}

// lose replaces the records with an empty store.
func (l *lossyActivity) lose() { l.cur.Store(memstore.New(l.now)) }

func (l *lossyActivity) Mark(id string)                  { l.cur.Load().Mark(id) }
func (l *lossyActivity) Open(id string) func()           { return l.cur.Load().Open(id) }
func (l *lossyActivity) Flush(ctx context.Context) error { return l.cur.Load().Flush(ctx) }
func (l *lossyActivity) Close() error                    { return l.cur.Load().Close() }
func (l *lossyActivity) Status(ctx context.Context, ids []string) (map[string]activity.Status, error) {
	return l.cur.Load().Status(ctx, ids)
}
func (l *lossyActivity) Publish(ctx context.Context, id string) error {
	return l.cur.Load().Publish(ctx, id)
}
func (l *lossyActivity) Subscribe(id string) (<-chan struct{}, func()) {
	return l.cur.Load().Subscribe(id)
}

// TestLostActivityIsUnknown: when the activity records vanish, a sandbox
// used a moment before is not suspended as "idle since it became ready";
// an idle one is still suspended, one full timeout after the loss.
func TestLostActivityIsUnknown(t *testing.T) {
	t.Parallel()
	var lossy *lossyActivity
	h := newIdleHarness(t, "sqlite", func(now func() time.Time) activity.Store {
		lossy = newLossyActivity(now)
		return lossy
	}, func(c *lifecycle.Config) { c.IdleCheckInterval = time.Hour }) // the test runs every check
	ctx := context.Background()
	busy, idle := h.readySandbox(t), h.readySandbox(t)
	check := func() {
		t.Helper()
		if err := h.m.CheckIdle(ctx); err != nil {
			t.Fatal(err)
		}
	}
	wantReady := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			sb, err := h.st.Sandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State != store.StateReady {
				t.Fatalf("sandbox %s is %s, want ready", id, sb.State)
			}
		}
	}

	h.clock.Advance(4 * time.Minute)
	h.act.Mark(busy.ID)
	check()
	wantReady(busy.ID, idle.ID)
	lossy.lose()                     // the mark of a moment ago is gone
	h.clock.Advance(2 * time.Minute) // 6 minutes ready, 2 since used
	check()
	wantReady(busy.ID, idle.ID)

	h.clock.Advance(2 * time.Minute)
	h.act.Mark(busy.ID)                        // traffic goes on
	h.clock.Advance(time.Minute + time.Second) // a full timeout since the loss
	check()
	h.waitState(t, idle.ID, store.StateSuspended, stateCeiling)
	wantReady(busy.ID)
}
