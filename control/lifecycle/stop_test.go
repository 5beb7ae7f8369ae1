package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// checkLedger fails the test unless id's billing lines obey the rule of
// its current state (lifecycle.CheckLedger).
func checkLedger(t *testing.T, st store.Store, id string) {
	t.Helper()
	ctx := context.Background()
	sb, err := st.Sandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	ss, err := st.Sessions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.CheckLedger(sb, ss); err != nil {
		t.Fatal(err)
	}
}

// TestStopStart: a stop closes compute with user_suspend and opens
// storage; a start closes storage and opens compute, with the workspace
// back. Both are idempotent. A sandbox patched wake_on_traffic=false
// refuses a traffic wake while stopped, and a start still brings it back.
func TestStopStart(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)

		got, err := h.m.Stop(ctx, h.acct, sb.ID)
		if err != nil {
			t.Fatalf("stop: %v", err)
		}
		if got.State != store.StateSuspending && got.State != store.StateSuspended {
			t.Fatalf("stop answered %s, want suspending or suspended", got.State)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		wantSessions(t, h.st, sb.ID, []string{"compute:user_suspend", "storage:open"})
		checkLedger(t, h.st, sb.ID)
		if again, err := h.m.Stop(ctx, h.acct, sb.ID); err != nil || again.State != store.StateSuspended {
			t.Fatalf("second stop: %s, %v; want suspended and no error", again.State, err)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:user_suspend", "storage:open"})

		back, err := h.m.Resume(ctx, h.acct, sb.ID)
		if err != nil || back.State != store.StateReady {
			t.Fatalf("start: %s, %v; want ready", back.State, err)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:user_suspend", "storage:restored", "compute:open"})
		checkLedger(t, h.st, sb.ID)
		if b, err := os.ReadFile(filepath.Join(back.Workspace, "notes.txt")); err != nil || string(b) != "kept across suspend\n" {
			t.Fatalf("workspace after start: %q, %v", b, err)
		}
		if again, err := h.m.Resume(ctx, h.acct, sb.ID); err != nil || again.State != store.StateReady {
			t.Fatalf("second start: %s, %v; want ready and no error", again.State, err)
		}

		off := false
		if _, err := h.m.Patch(ctx, h.acct, sb.ID, lifecycle.Patch{WakeOnTraffic: &off}); err != nil {
			t.Fatalf("patch wake_on_traffic: %v", err)
		}
		if _, err := h.m.Stop(ctx, h.acct, sb.ID); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		if err := h.wake(sb.ID, 5*time.Second); !errors.Is(err, lifecycle.ErrWakeDisabled) {
			t.Fatalf("traffic wake of a sandbox that does not wake on traffic: %v, want ErrWakeDisabled", err)
		}
		h.holds(t, sb.ID, store.StateSuspended, 300*time.Millisecond)
		if _, err := h.m.Resume(ctx, h.acct, sb.ID); err != nil {
			t.Fatalf("start of a sandbox that does not wake on traffic: %v", err)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:user_suspend", "storage:restored", "compute:user_suspend", "storage:restored", "compute:open"})
		checkLedger(t, h.st, sb.ID)

		// A deleted sandbox can be neither stopped nor started.
		if _, err := h.m.Delete(ctx, h.acct, sb.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.Stop(ctx, h.acct, sb.ID); !errors.Is(err, lifecycle.ErrState) {
			t.Fatalf("stop of a deleted sandbox: %v, want ErrState", err)
		}
		if _, err := h.m.Resume(ctx, h.acct, sb.ID); !errors.Is(err, lifecycle.ErrState) {
			t.Fatalf("start of a deleted sandbox: %v, want ErrState", err)
		}
	})
}

// TestSuspendFailingEveryAttemptSettles: a suspend whose snapshot and
// whose server restart both fail on every attempt does not leave the
// sandbox suspending: its last attempt finds the server still running and
// returns it to ready, with the compute line open throughout.
func TestSuspendFailingEveryAttemptSettles(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)
		h.prov.failSuspend.Store(true)
		h.prov.failProvision.Store(true)
		if _, err := h.m.Stop(ctx, h.acct, sb.ID); err != nil {
			t.Fatal(err)
		}
		// Five attempts with 1+2+4+8 s of backoff between them.
		h.waitState(t, sb.ID, store.StateReady, 2*stateCeiling)
		wantSessions(t, h.st, sb.ID, []string{"compute:open"})
		checkLedger(t, h.st, sb.ID)
	})
}

// forceState moves id to state with its event as a transition would,
// without the job that would carry it on: a job lost with its process.
func forceState(t *testing.T, h *idleHarness, id string, state store.State, reason string) {
	t.Helper()
	ctx := context.Background()
	err := h.st.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		sb.State = state
		if state == store.StateRestoring {
			far := time.Now().Add(time.Hour) // a restorer that hangs
			sb.LeaseHolder, sb.LeaseUntil, sb.RestoreAttempts = "lease-hung", &far, 1
		}
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		return tx.InsertEvent(ctx, store.Event{SandboxID: id, AccountID: sb.AccountID, Type: "state", State: state, Reason: reason, Actor: "test", At: h.clock.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSettleStuck: sandboxes left suspending or restoring by a lost or
// hung job are settled by the periodic sweep once SettleAfter passes,
// according to what the provider still holds, with an exact ledger.
func TestSettleStuck(t *testing.T) {
	const settleAfter = 2 * time.Minute
	tune := func(c *lifecycle.Config) { c.SettleAfter = settleAfter }
	cases := []struct {
		name string
		// stick leaves the ready sandbox stuck.
		stick     func(t *testing.T, h *idleHarness, sb store.Sandbox)
		wantState store.State
		wantLines []string
	}{
		{"suspending, server still runs", func(t *testing.T, h *idleHarness, sb store.Sandbox) {
			forceState(t, h, sb.ID, store.StateSuspending, lifecycle.ReasonIdleOffload)
		}, store.StateReady, []string{"compute:open"}},
		{"suspending, snapshot taken", func(t *testing.T, h *idleHarness, sb store.Sandbox) {
			forceState(t, h, sb.ID, store.StateSuspending, lifecycle.ReasonUserSuspend)
			if err := h.prov.Local.Suspend(context.Background(), sb.ID); err != nil {
				t.Fatal(err)
			}
		}, store.StateSuspended, []string{"compute:user_suspend", "storage:open"}},
		{"suspending, nothing left", func(t *testing.T, h *idleHarness, sb store.Sandbox) {
			forceState(t, h, sb.ID, store.StateSuspending, lifecycle.ReasonIdleOffload)
			if err := h.prov.Local.Destroy(context.Background(), sb.ID); err != nil {
				t.Fatal(err)
			}
		}, store.StateFailed, []string{"compute:stuck"}},
		{"restoring, restorer hung", func(t *testing.T, h *idleHarness, sb store.Sandbox) {
			if err := h.m.Suspend(context.Background(), sb.ID, "test"); err != nil {
				t.Fatal(err)
			}
			h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
			forceState(t, h, sb.ID, store.StateRestoring, lifecycle.ReasonWake)
		}, store.StateFailed, []string{"compute:idle_offload", "storage:stuck"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			forBackends(t, func(t *testing.T, h *idleHarness) {
				sb := h.readySandbox(t)
				c.stick(t, h, sb)
				stuck, _ := h.st.Sandbox(context.Background(), sb.ID)
				// Within its budget nothing touches it.
				h.holds(t, sb.ID, stuck.State, 1500*time.Millisecond)
				h.clock.Advance(settleAfter + time.Second)
				h.waitState(t, sb.ID, c.wantState, stateCeiling)
				wantSessions(t, h.st, sb.ID, c.wantLines)
				checkLedger(t, h.st, sb.ID)
			}, tune)
		})
	}
}
