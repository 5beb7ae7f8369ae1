package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestDeadlineMinutesBounds: a minute count outside 1..the lifetime cap is
// refused as invalid before any arithmetic, on create and on a deadline
// change. 153722868 minutes is the first that overflows time.Duration; an
// overflowed deadline would land in the past and the reaper would end the
// sandbox.
func TestDeadlineMinutesBounds(t *testing.T) {
	h := newHarness(t, "sqlite", lifecycle.Config{}, nil)
	ctx := context.Background()
	live, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small"})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, -1, 7*24*60 + 1, 153722867, 153722868, 1_000_000_000_000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", DeadlineMinutes: &n})
			if !errors.Is(err, lifecycle.ErrInvalid) {
				t.Fatalf("create with deadline_minutes %d: %+v, %v; want ErrInvalid", n, sb, err)
			}
			sb, err = h.m.Extend(ctx, h.acct, live.ID, n)
			if !errors.Is(err, lifecycle.ErrInvalid) {
				t.Fatalf("deadline_minutes %d on %s: deadline %s, %v; want ErrInvalid", n, live.ID, sb.DeadlineAt, err)
			}
		})
	}
	got, err := h.m.Get(ctx, h.acct, live.ID)
	if err != nil || !got.DeadlineAt.Equal(live.DeadlineAt) {
		t.Fatalf("after refused changes: deadline %s (%v), want %s unchanged", got.DeadlineAt, err, live.DeadlineAt)
	}
	// The cap itself is allowed.
	most := 7 * 24 * 60
	if _, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", DeadlineMinutes: &most}); err != nil {
		t.Fatalf("create with deadline_minutes %d: %v, want accepted", most, err)
	}
	list, _ := h.st.Sandboxes(ctx, store.ListOptions{AccountID: h.acct.ID, Limit: 10})
	if len(list) != 2 {
		t.Fatalf("%d sandboxes, want 2 (refused creates create nothing)", len(list))
	}
}
