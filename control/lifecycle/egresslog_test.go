package lifecycle_test

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestSweepEgressLog: the sweep deletes egress decisions older than
// EgressLogRetention and keeps the newer, in batches, so a backlog
// larger than one batch goes in one sweep; a second sweep finds nothing.
func TestSweepEgressLog(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, backend, lifecycle.Config{EgressLogRetention: 7 * 24 * time.Hour}, nil)
			ctx := context.Background()
			// The sweep is called directly here; the reaper, which runs it
			// too (once at start, then every ReapInterval), must not race
			// it: on Postgres its first run can land after the inserts.
			if err := h.st.StopJobs(ctx); err != nil {
				t.Fatal(err)
			}
			now := h.clock.Now().UTC()
			const old = 2345 // more than two batches
			err := h.st.InTx(ctx, func(tx store.Tx) error {
				for i := range old {
					d := store.EgressDecision{SandboxID: "sbx-log-old", At: now.Add(-8*24*time.Hour - time.Duration(i)*time.Second), Host: "old.test", Port: 443, Verdict: "denied"}
					if err := tx.InsertEgressDecision(ctx, d); err != nil {
						return err
					}
				}
				for _, age := range []time.Duration{6 * 24 * time.Hour, time.Hour} {
					d := store.EgressDecision{SandboxID: "sbx-log-new", At: now.Add(-age), Host: "new.test", Port: 443, Verdict: "allowed"}
					if err := tx.InsertEgressDecision(ctx, d); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			n, err := h.m.SweepEgressLog(ctx)
			if err != nil || n != old {
				t.Fatalf("sweep deleted %d, %v; want %d", n, err, old)
			}
			if left, _ := h.st.EgressDecisions(ctx, "sbx-log-old", 0, 10); len(left) != 0 {
				t.Errorf("%d decisions older than the retention left", len(left))
			}
			if kept, _ := h.st.EgressDecisions(ctx, "sbx-log-new", 0, 10); len(kept) != 2 {
				t.Errorf("%d decisions within the retention kept; want 2", len(kept))
			}
			if n, err := h.m.SweepEgressLog(ctx); err != nil || n != 0 {
				t.Errorf("second sweep deleted %d, %v; want 0", n, err)
			}
			// A day later the older of the two (6 days old) is past it too.
			h.clock.Advance(24 * time.Hour)
			if n, err := h.m.SweepEgressLog(ctx); err != nil || n != 1 {
				t.Errorf("sweep a day later deleted %d, %v; want 1", n, err)
			}
		})
	}
}
