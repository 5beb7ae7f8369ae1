// Package activitytest is the conformance suite every activity.Store
// passes (memstore and redisstore).
package activitytest

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/activity"
)

var seq atomic.Int64

// id returns a sandbox ID unique in this process run.
func id(t *testing.T) string {
	return fmt.Sprintf("sbx-test-%d-%d", time.Now().UnixNano(), seq.Add(1))
}

// Backend makes stores for the suite.
type Backend struct {
	// New returns a fresh store (its own keys) that the suite closes; it
	// is called once per subtest.
	New func(t *testing.T) activity.Store
	// Lose makes s's backend lose every record it holds, as a Redis that
	// restarts empty or is flushed, or an in-memory store whose process
	// restarts, and returns the store to use from then on (s itself, or
	// its successor).
	Lose func(t *testing.T, s activity.Store) activity.Store
}

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	ctx := context.Background()
	newStore := b.New
	status := func(t *testing.T, s activity.Store, id string) activity.Status {
		t.Helper()
		m, err := s.Status(ctx, []string{id})
		if err != nil {
			t.Fatalf("Status(%s): %v", id, err)
		}
		return m[id]
	}
	flush := func(t *testing.T, s activity.Store) {
		t.Helper()
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("Flush: %v", err)
		}
	}

	// each runs a parallel subtest with a fresh store and a sandbox ID of
	// its own.
	each := func(name string, fn func(t *testing.T, s activity.Store, sb string)) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			fn(t, newStore(t), id(t))
		})
	}

	each("unknown sandbox has no record", func(t *testing.T, s activity.Store, sb string) {
		if got := status(t, s, sb); !got.LastSeen.IsZero() || got.Live {
			t.Fatalf("got %+v, want zero status", got)
		}
	})

	each("mark is read back after flush", func(t *testing.T, s activity.Store, sb string) {
		before := time.Now().Add(-time.Millisecond)
		s.Mark(sb)
		flush(t, s)
		got := status(t, s, sb)
		if got.LastSeen.Before(before) || got.LastSeen.After(time.Now().Add(time.Second)) {
			t.Fatalf("LastSeen = %v, want about %v", got.LastSeen, before)
		}
		if got.Live {
			t.Fatal("a mark alone must not make the sandbox live")
		}
	})

	each("open connection is live until closed", func(t *testing.T, s activity.Store, sb string) {
		closeA := s.Open(sb)
		closeB := s.Open(sb)
		flush(t, s)
		if !status(t, s, sb).Live {
			t.Fatal("want live with two open connections")
		}
		closeA()
		closeA() // idempotent
		flush(t, s)
		if !status(t, s, sb).Live {
			t.Fatal("want live with one open connection left")
		}
		closeB()
		flush(t, s)
		if got := status(t, s, sb); got.Live || got.LastSeen.IsZero() {
			t.Fatalf("after close got %+v, want not live, seen", got)
		}
	})

	each("epoch is named and stable while nothing is lost", func(t *testing.T, s activity.Store, sb string) {
		before := time.Now().Add(-time.Second)
		first := status(t, s, sb)
		if first.Epoch == "" || first.EpochStart.IsZero() {
			t.Fatalf("got %+v, want a named epoch with a start", first)
		}
		if first.EpochStart.Before(before.Add(-time.Minute)) || first.EpochStart.After(time.Now().Add(time.Second)) {
			t.Fatalf("EpochStart = %v, want about now (%v) for a fresh store", first.EpochStart, before)
		}
		s.Mark(sb)
		done := s.Open(sb)
		flush(t, s)
		done()
		flush(t, s)
		if got := status(t, s, sb); got.Epoch != first.Epoch || !got.EpochStart.Equal(first.EpochStart) {
			t.Fatalf("epoch moved from %s@%v to %s@%v with nothing lost", first.Epoch, first.EpochStart, got.Epoch, got.EpochStart)
		}
	})

	// The idle detector's safety rests on this: records that vanish must
	// not read as a sandbox idle since before they vanished.
	each("lost records start a new epoch", func(t *testing.T, s activity.Store, sb string) {
		s.Mark(sb)
		flush(t, s)
		before := status(t, s, sb)
		if before.LastSeen.IsZero() {
			t.Fatalf("got %+v before the loss, want seen", before)
		}
		lostAt := time.Now()
		s = b.Lose(t, s)
		after := status(t, s, sb)
		if after.Epoch == before.Epoch {
			t.Fatalf("epoch %s survived the loss of its records", after.Epoch)
		}
		if after.EpochStart.Before(lostAt.Add(-time.Second)) {
			t.Fatalf("new EpochStart %v is before the loss at %v", after.EpochStart, lostAt)
		}
		s.Mark(sb)
		flush(t, s)
		if got := status(t, s, sb); got.Epoch != after.Epoch || got.LastSeen.IsZero() {
			t.Fatalf("after marking in the new epoch got %+v, want epoch %s and seen", got, after.Epoch)
		}
	})

	each("publish reaches subscriber", func(t *testing.T, s activity.Store, sb string) {
		other := id(t)
		ch, cancel := s.Subscribe(sb)
		defer cancel()
		chOther, cancelOther := s.Subscribe(other)
		defer cancelOther()
		if err := s.Publish(ctx, sb); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("no notification within 5s")
		}
		select {
		case <-chOther:
			t.Fatal("subscriber of another sandbox was notified")
		case <-time.After(100 * time.Millisecond):
		}
	})
}
