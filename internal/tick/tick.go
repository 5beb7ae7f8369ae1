// Package tick is the loop of a background refresher (an activity flush,
// a lock or lease renewal, a file reload): call f every interval until the
// context ends.
package tick

import (
	"context"
	"time"
)

// Every calls f every d, the first time d from now, until ctx ends or f
// returns false. It runs in the caller's goroutine; f runs in it too, so
// a slow f delays the next call rather than overlapping it.
func Every(ctx context.Context, d time.Duration, f func() bool) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !f() {
			return
		}
	}
}
