package lifecycle_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// suspended returns a ready sandbox of h, suspended.
func (h *idleHarness) suspended(t *testing.T) store.Sandbox {
	t.Helper()
	sb := h.readySandbox(t)
	if err := h.m.Suspend(context.Background(), sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	return h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
}

// wake wakes sandbox id, giving up after limit, and returns what Wake
// returned.
func (h *idleHarness) wake(id string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return h.m.Wake(ctx, id)
}

// TestWakeRestoresInline: the waker that moves a sandbox to restoring
// restores it itself, so a wake does not wait for a job worker to pick
// the restore up: with the job queue stopped, Wake still returns ready.
func TestWakeRestoresInline(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.suspended(t)
		if err := h.st.StopJobs(ctx); err != nil {
			t.Fatal(err)
		}
		if err := h.wake(sb.ID, 20*time.Second); err != nil {
			t.Fatalf("wake with the job queue stopped: %v", err)
		}
		if n := h.prov.restores.Load(); n != 1 {
			t.Fatalf("restores: got %d, want 1", n)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:restored", "compute:open"})
	})
}

// TestWakeInlineFailureRetriedByJob: when the waker's restore fails, the
// backstop sweep retries it once the backoff lapses, and the waiter still
// gets ready.
func TestWakeInlineFailureRetriedByJob(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", nil)
	sb := h.suspended(t)
	h.prov.failRestores.Store(1)
	if err := h.wake(sb.ID, 30*time.Second); err != nil {
		t.Fatalf("wake after a failed inline restore: %v", err)
	}
	if n := h.prov.restores.Load(); n != 2 {
		t.Fatalf("restores: got %d, want 2 (the failed inline one, then the sweep's)", n)
	}
	wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:restored", "compute:open"})
}

// TestWakeReadyEventSaysSteps: the ready event a wake's restore writes
// says where the wake went by step, from the wake call on, as create's
// does: loadtest ready reads it to split a wake's overhead.
func TestWakeReadyEventSaysSteps(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", nil)
	sb := h.suspended(t)
	if err := h.wake(sb.ID, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	evs, err := h.st.Events(context.Background(), sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var msg string
	for _, e := range evs {
		if e.Type == "state" && e.State == store.StateReady && e.Reason == lifecycle.ReasonWake {
			msg = e.Message
		}
	}
	re := regexp.MustCompile(`^steps: begin=[0-9.]+ms spec=[0-9.]+ms restore=[0-9.]+ms services=[0-9.]+ms total=[0-9.]+ms$`)
	if !re.MatchString(msg) {
		t.Fatalf("the wake's ready event says %q, want it to match %s", msg, re)
	}
}
