package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestPatchIdleSettings (issue 30): PATCH takes idle_timeout_minutes,
// keep_awake_while_busy and retention_days under create's bounds (a
// FieldError naming the field and the range), stores them with a
// settings event, and a retention set on an already suspended sandbox
// deletes it once that long has passed since the suspend.
func TestPatchIdleSettings(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)
		one, six, zero, huge := 1, 6, 0, 4000
		off := false
		for _, tc := range []struct {
			name  string
			patch lifecycle.Patch
			field string
		}{
			{"idle above the account's", lifecycle.Patch{IdleTimeoutMinutes: &six}, "idle_timeout_minutes"},
			{"idle zero", lifecycle.Patch{IdleTimeoutMinutes: &zero}, "idle_timeout_minutes"},
			{"retention zero", lifecycle.Patch{RetentionDays: &zero}, "retention_days"},
			{"retention past the lifetime", lifecycle.Patch{RetentionDays: &huge}, "retention_days"},
		} {
			_, err := h.m.Patch(ctx, h.acct, sb.ID, tc.patch)
			var fe *lifecycle.FieldError
			if !errors.As(err, &fe) || fe.Field != tc.field || !errors.Is(err, lifecycle.ErrInvalid) {
				t.Errorf("%s: %v, want a FieldError for %s", tc.name, err, tc.field)
			}
		}

		got, err := h.m.Patch(ctx, h.acct, sb.ID, lifecycle.Patch{IdleTimeoutMinutes: &one, KeepAwakeWhileBusy: &off})
		if err != nil {
			t.Fatal(err)
		}
		if got.IdleTimeout != time.Minute || !got.IgnoreBusy {
			t.Fatalf("patched: idle %s ignore_busy %t, want 1m true", got.IdleTimeout, got.IgnoreBusy)
		}
		if stored, _ := h.st.Sandbox(ctx, sb.ID); stored.IdleTimeout != time.Minute || !stored.IgnoreBusy {
			t.Fatalf("stored: idle %s ignore_busy %t", stored.IdleTimeout, stored.IgnoreBusy)
		}

		if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
		if _, err := h.m.Patch(ctx, h.acct, sb.ID, lifecycle.Patch{RetentionDays: &one}); err != nil {
			t.Fatal(err)
		}
		evs, err := h.st.Events(ctx, sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		settings := 0
		for _, e := range evs {
			if e.Type == "settings" {
				settings++
			}
		}
		if settings != 2 {
			t.Errorf("%d settings events, want 2 (refused patches write none)", settings)
		}
		h.clock.Advance(25 * time.Hour)
		if err := h.m.SweepRetention(ctx); err != nil {
			t.Fatal(err)
		}
		end, err := h.st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if end.EndReason != lifecycle.ReasonRetention {
			t.Fatalf("a day after the patched retention: %s (%s), want deleted for retention", end.State, end.EndReason)
		}
		checkLedger(t, h.st, sb.ID)
	})
}
