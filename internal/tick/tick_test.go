package tick_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sbxedge/sbx/internal/tick"
)

// TestEvery: f runs once per interval, never before the first one, and
// the loop ends when f says so or when the context ends.
func TestEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		var at []time.Duration
		tick.Every(t.Context(), time.Second, func() bool {
			at = append(at, time.Since(start))
			return len(at) < 3
		})
		if want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}; len(at) != 3 || at[0] != want[0] || at[1] != want[1] || at[2] != want[2] {
			t.Fatalf("calls at %v, want %v", at, want)
		}

		ctx, cancel := context.WithTimeout(t.Context(), 2500*time.Millisecond)
		defer cancel()
		n := 0
		tick.Every(ctx, time.Second, func() bool { n++; return true })
		if n != 2 {
			t.Fatalf("calls before the context ended: %d, want 2", n)
		}
	})
}
