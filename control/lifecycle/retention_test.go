package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestRetentionDelete: a sandbox created with retention_days 2 that stays
// suspended gets one retention_warning event a day before, and is then
// deleted with its storage line closed for reason retention, on Postgres
// and SQLite.
func TestRetentionDelete(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		two, mins := 2, 600
		sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", DeadlineMinutes: &mins, RetentionDays: &two})
		if err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateReady, stateCeiling)
		if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		warnings := func() int {
			evs, err := h.st.Events(ctx, sb.ID, 0)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, e := range evs {
				if e.Type == "retention_warning" {
					n++
				}
			}
			return n
		}

		h.clock.Advance(22 * time.Hour) // more than a day left
		if err := h.m.SweepRetention(ctx); err != nil {
			t.Fatal(err)
		}
		if n := warnings(); n != 0 {
			t.Fatalf("%d warnings more than a day before the deletion", n)
		}
		h.clock.Advance(3 * time.Hour) // 25 h suspended: less than a day left
		for range 2 {
			if err := h.m.SweepRetention(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := warnings(); n != 1 {
			t.Fatalf("%d retention warnings within a day of the deletion, want 1", n)
		}
		if got, _ := h.st.Sandbox(ctx, sb.ID); got.State != store.StateSuspended {
			t.Fatalf("warned sandbox is %s, want still suspended", got.State)
		}
		h.clock.Advance(24 * time.Hour) // 49 h
		if err := h.m.SweepRetention(ctx); err != nil {
			t.Fatal(err)
		}
		got, err := h.st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got.State != store.StateTerminating && got.State != store.StateTerminated || got.EndReason != lifecycle.ReasonRetention {
			t.Fatalf("after retention: %s (%s), want terminating for retention", got.State, got.EndReason)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:idle_offload", "storage:retention"})
		checkLedger(t, h.st, sb.ID)
	})
}
