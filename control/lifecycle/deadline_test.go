package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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
			sb, err = h.m.ChangeDeadline(ctx, h.acct, live.ID, lifecycle.DeadlineChange{DeadlineMinutes: &n})
			if !errors.Is(err, lifecycle.ErrInvalid) {
				t.Fatalf("deadline_minutes %d on %s: deadline %s, %v; want ErrInvalid", n, live.ID, sb.DeadlineAt, err)
			}
			sb, err = h.m.ChangeDeadline(ctx, h.acct, live.ID, lifecycle.DeadlineChange{ExtendMinutes: &n})
			if !errors.Is(err, lifecycle.ErrInvalid) {
				t.Fatalf("extend_minutes %d on %s: deadline %s, %v; want ErrInvalid", n, live.ID, sb.DeadlineAt, err)
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

func ptr[T any](v T) *T { return &v }

// TestChangeDeadline: extend_minutes adds to the current deadline (capped
// at the lifetime limit); a deadline_minutes that would shorten the
// deadline is refused, naming the current one, unless allow_shorten.
func TestChangeDeadline(t *testing.T) {
	h := newHarness(t, "sqlite", lifecycle.Config{}, nil)
	ctx := context.Background()
	sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", DeadlineMinutes: ptr(10)})
	if err != nil {
		t.Fatal(err)
	}

	ext, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{ExtendMinutes: ptr(45)})
	if err != nil {
		t.Fatal(err)
	}
	if want := sb.DeadlineAt.Add(45 * time.Minute); !ext.DeadlineAt.Equal(want) {
		t.Fatalf("extend 45 of a deadline 10 minutes away: %s, want %s (55 minutes away)", ext.DeadlineAt, want)
	}

	_, err = h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{DeadlineMinutes: ptr(45)})
	var se *lifecycle.ShortenError
	if !errors.As(err, &se) || !errors.Is(err, lifecycle.ErrDeadlineShortened) || !se.Current.Equal(ext.DeadlineAt) ||
		!strings.Contains(se.Error(), ext.DeadlineAt.UTC().Format(time.RFC3339)) {
		t.Fatalf("deadline_minutes 45 with 55 left: %v, want a ShortenError naming %s", err, ext.DeadlineAt)
	}
	if got, _ := h.m.Get(ctx, h.acct, sb.ID); !got.DeadlineAt.Equal(ext.DeadlineAt) {
		t.Fatalf("refused shorten moved the deadline to %s, want %s", got.DeadlineAt, ext.DeadlineAt)
	}
	short, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{DeadlineMinutes: ptr(45), AllowShorten: true})
	if err != nil || !short.DeadlineAt.Before(ext.DeadlineAt) {
		t.Fatalf("allow_shorten: %s, %v; want earlier than %s", short.DeadlineAt, err, ext.DeadlineAt)
	}
	longer, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{DeadlineMinutes: ptr(120)})
	if err != nil || !longer.DeadlineAt.After(short.DeadlineAt) {
		t.Fatalf("deadline_minutes 120: %s, %v; want later than %s", longer.DeadlineAt, err, short.DeadlineAt)
	}

	capped, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{ExtendMinutes: ptr(7 * 24 * 60)})
	if limit := sb.CreatedAt.Add(7 * 24 * time.Hour); err != nil || !capped.DeadlineAt.Equal(limit) {
		t.Fatalf("extend by the whole cap: %s, %v; want the cap %s", capped.DeadlineAt, err, limit)
	}

	for name, ch := range map[string]lifecycle.DeadlineChange{
		"neither":                   {},
		"both":                      {ExtendMinutes: ptr(5), DeadlineMinutes: ptr(5)},
		"allow_shorten with extend": {ExtendMinutes: ptr(5), AllowShorten: true},
		"extend overflowing":        {ExtendMinutes: ptr(153722868)},
	} {
		if _, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, ch); !errors.Is(err, lifecycle.ErrInvalid) {
			t.Errorf("%s: %v, want ErrInvalid", name, err)
		}
	}
}

// TestExtendSuspended: while suspended the deadline clock is paused, so an
// extension adds to the effective deadline (stored + time suspended), and
// the wake lands on exactly that.
func TestExtendSuspended(t *testing.T) {
	h := newIdleHarness(t, "sqlite", nil)
	ctx := context.Background()
	sb := h.readySandbox(t)
	h.clock.Advance(idleTimeout + time.Second)
	susp := h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
	h.clock.Advance(10 * time.Minute)

	before := lifecycle.EffectiveDeadline(susp, h.clock.Now(), 7*24*time.Hour)
	if _, err := h.m.ChangeDeadline(ctx, h.acct, sb.ID, lifecycle.DeadlineChange{ExtendMinutes: ptr(30)}); err != nil {
		t.Fatal(err)
	}
	if err := h.m.Wake(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	woke, _ := h.st.Sandbox(ctx, sb.ID)
	want := before.Add(30 * time.Minute)
	if d := woke.DeadlineAt.Sub(want); d < 0 || d > time.Minute {
		t.Fatalf("after extend 30 while suspended and a wake: deadline %s, want %s (plus the moments the wake took)", woke.DeadlineAt, want)
	}
}
