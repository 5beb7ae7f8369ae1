package lifecycle_test

// Ledger tests for the rows of the product spec's transition table that
// idle offload and wake implement: each asserts the state reached and the
// billing lines it leaves.

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// TestComputeLineRunsWhileSuspending: ready -> suspending leaves the
// compute line open ("session continues"); suspending -> suspended closes
// it with idle_offload at the moment the snapshot is stored and opens the
// storage line at that same instant, and only then stops the deadline
// clock.
func TestComputeLineRunsWhileSuspending(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)
		release := gate(t, &h.prov.suspendGate)
		if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		mid, err := h.st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if mid.State != store.StateSuspending || mid.SuspendedAt != nil {
			t.Fatalf("after Suspend: state %s suspended_at %v, want suspending and none", mid.State, mid.SuspendedAt)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:open"})

		h.clock.Advance(time.Minute) // the snapshot takes a minute
		stored := h.clock.Now()
		release()
		susp := h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		ss := wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:open"})
		if ss[0].EndedAt.Before(stored.Add(-time.Second)) {
			t.Fatalf("compute line ended %v, want at or after the snapshot was stored (%v)", ss[0].EndedAt, stored)
		}
		if !ss[1].StartedAt.Equal(*ss[0].EndedAt) {
			t.Fatalf("storage line starts %v, compute line ends %v: want one instant", ss[1].StartedAt, ss[0].EndedAt)
		}
		if susp.SuspendedAt == nil || !susp.SuspendedAt.Equal(ss[1].StartedAt) {
			t.Fatalf("suspended_at %v, want the storage line's start %v", susp.SuspendedAt, ss[1].StartedAt)
		}
	})
}

// TestRestoreBackstopAfterCrash: a sandbox left restoring by a process
// that died mid-restore (the row as the waker's transaction wrote it, with
// nobody working on it) is restored by another worker within seconds, not
// after a fixed delay of minutes.
func TestRestoreBackstopAfterCrash(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.suspended(t)
		err := h.st.InTx(ctx, func(tx store.Tx) error {
			cur, err := tx.SandboxForUpdate(ctx, sb.ID)
			if err != nil {
				return err
			}
			cur.State = store.StateRestoring
			return tx.UpdateSandbox(ctx, cur)
		})
		if err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateReady, 20*time.Second)
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:restored", "compute:open"})
	})
}

// restoreTune keeps restore retries short: three attempts, a 2 s lease.
func restoreTune(c *lifecycle.Config) {
	c.RestoreAttempts = 3
	c.RestoreLease = 2 * time.Second
}

// TestRestoreFailureEndsFailed: suspended -> restoring -> failed. A
// restore that keeps failing is retried within the budget
// (RestoreAttempts), then the sandbox fails: the storage line closes with
// restore_failed, the end reason says so, waiters are told it cannot wake,
// and what the provider holds is released. A snapshot that no longer
// exists is not retried: it fails at once with snapshot_expired.
func TestRestoreFailureEndsFailed(t *testing.T) {
	for _, tc := range []struct {
		name         string
		err          error
		wantReason   string
		wantRestores int32
	}{
		{"retries exhausted", errors.New("injected: restore failed"), lifecycle.ReasonRestoreFailed, 3},
		{"snapshot expired", fmt.Errorf("injected: %w", provider.ErrSnapshotGone), lifecycle.ReasonSnapshotExpired, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			forBackends(t, func(t *testing.T, h *idleHarness) {
				ctx := context.Background()
				sb := h.suspended(t)
				h.prov.restoreErr.Store(&tc.err)
				h.prov.failRestores.Store(1000)
				if err := h.wake(sb.ID, stateCeiling); !errors.Is(err, lifecycle.ErrCannotWake) {
					t.Fatalf("wake of a sandbox whose restore fails: %v, want ErrCannotWake", err)
				}
				got, err := h.st.Sandbox(ctx, sb.ID)
				if err != nil {
					t.Fatal(err)
				}
				if got.State != store.StateFailed || got.EndReason != tc.wantReason || got.TerminatedAt == nil {
					t.Fatalf("after failed restores: state %s end_reason %q terminated_at %v, want failed, %q, set",
						got.State, got.EndReason, got.TerminatedAt, tc.wantReason)
				}
				wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:" + tc.wantReason})
				if n := h.prov.restores.Load(); n != tc.wantRestores {
					t.Fatalf("restore attempts: got %d, want %d", n, tc.wantRestores)
				}
				waitGone(t, h.prov, sb.ID)
			}, restoreTune)
		})
	}
}

// waitGone waits until the provider holds nothing of id.
func waitGone(t *testing.T, p provider.Provider, id string) {
	t.Helper()
	deadline := time.Now().Add(stateCeiling)
	for {
		in, err := p.Status(context.Background(), id)
		if errors.Is(err, provider.ErrNotFound) || (err == nil && in.Phase == provider.PhaseNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("provider still holds %s after it failed: %+v, %v", id, in, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRestoreLeaseHeldUntilReady: the lease outlives the provider's
// restore until the sandbox is marked ready, so a restorer slow after its
// restore (services starting, a store slow to commit) is not taken over
// by the backstop, which would restore the sandbox a second time.
func TestRestoreLeaseHeldUntilReady(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		wakeThroughStall(t, h, h.suspended(t).ID, &h.forgetGate)
	}, restoreTune)
}

// wakeThroughStall wakes sandbox id with its restorer held at gate g
// until the lease it was first granted has lapsed by the clock and been
// renewed past it, runs the backstop sweep then (as its periodic job
// would, which runs too), and asserts that the backstop left the sandbox
// alone: one restore, and the sandbox ready with its sessions in order.
func wakeThroughStall(t *testing.T, h *idleHarness, id string, g *atomic.Pointer[chan struct{}]) {
	t.Helper()
	release := gate(t, g)
	woke := make(chan error, 1)
	go func() {
		woke <- h.wake(id, stateCeiling)
	}()
	waitLeaseRenewedPastFirst(t, h.st, id)
	if err := h.m.SweepRestores(t.Context()); err != nil {
		t.Fatalf("sweep while the first restorer is alive: %v", err)
	}
	if n := h.prov.restores.Load(); n != 1 {
		t.Fatalf("restores while the first restorer is alive: got %d, want 1", n)
	}
	release()
	if err := <-woke; err != nil {
		t.Fatalf("wake: %v", err)
	}
	if n := h.prov.restores.Load(); n != 1 {
		t.Fatalf("restores: got %d, want 1", n)
	}
	wantSessions(t, h.st, id, []string{"compute:idle_offload", "storage:restored", "compute:open"})
}

// waitLeaseRenewedPastFirst waits until sandbox id's restore lease, the
// first time it is seen, has lapsed by the wall clock (lease times are
// wall-clock), and the lease on the row reaches past it: its holder
// renewed it in time.
func waitLeaseRenewedPastFirst(t *testing.T, st store.Store, id string) {
	t.Helper()
	var first time.Time
	for deadline := time.Now().Add(stateCeiling); ; time.Sleep(20 * time.Millisecond) {
		sb, err := st.Sandbox(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State == store.StateRestoring && sb.LeaseUntil != nil {
			if first.IsZero() {
				first = *sb.LeaseUntil
			}
			if time.Now().After(first) && sb.LeaseUntil.After(first) {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: lease first seen until %v not renewed past it within %v (now %+v)", id, first, stateCeiling, sb)
		}
	}
}

// TestRestoreLeaseHeldWhileRestoring: a slow restore in a live process
// keeps its lease, so the backstop never starts a second restore; a crash
// with the lease held (the row as a live waker wrote it, then nobody
// renewing) is picked up once the lease runs out.
func TestRestoreLeaseHeldWhileRestoring(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.suspended(t)
		wakeThroughStall(t, h, sb.ID, &h.prov.restoreGate)

		// Suspend again, then leave it restoring with a lease nobody
		// renews: a process that died right after winning the wake.
		h.prov.restoreGate.Store(nil)
		if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		err := h.st.InTx(ctx, func(tx store.Tx) error {
			cur, err := tx.SandboxForUpdate(ctx, sb.ID)
			if err != nil {
				return err
			}
			until := time.Now().Add(2 * time.Second)
			cur.State, cur.LeaseHolder, cur.LeaseUntil, cur.RestoreAttempts = store.StateRestoring, "dead-process", &until, 1
			return tx.UpdateSandbox(ctx, cur)
		})
		if err != nil {
			t.Fatal(err)
		}
		back := h.waitState(t, sb.ID, store.StateReady, 20*time.Second)
		if back.LeaseHolder != "" || back.LeaseUntil != nil || back.RestoreAttempts != 0 {
			t.Fatalf("ready sandbox keeps a restore lease: holder %q until %v attempts %d", back.LeaseHolder, back.LeaseUntil, back.RestoreAttempts)
		}
		if n := h.prov.restores.Load(); n != 2 {
			t.Fatalf("restores: got %d, want 2", n)
		}
	}, restoreTune)
}
