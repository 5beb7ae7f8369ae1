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

// Run runs the suite. newStore returns a fresh store (its own keys) that
// the suite closes; it is called once per subtest.
func Run(t *testing.T, newStore func(t *testing.T) activity.Store) {
	ctx := context.Background()
	status := func(t *testing.T, s activity.Store, id string) activity.Status {
		t.Helper()
		m, err := s.Status(ctx, []string{id})
		if err != nil {
			t.Fatalf("Status(%s): %v", id, err)
		}
		return m[id]
	}

	t.Run("unknown sandbox has no record", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		if got := status(t, s, id(t)); !got.LastSeen.IsZero() || got.Live {
			t.Fatalf("got %+v, want zero status", got)
		}
	})

	t.Run("mark is read back after flush", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		sb := id(t)
		before := time.Now().Add(-time.Millisecond)
		s.Mark(sb)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		got := status(t, s, sb)
		if got.LastSeen.Before(before) || got.LastSeen.After(time.Now().Add(time.Second)) {
			t.Fatalf("LastSeen = %v, want about %v", got.LastSeen, before)
		}
		if got.Live {
			t.Fatal("a mark alone must not make the sandbox live")
		}
	})

	t.Run("open connection is live until closed", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		sb := id(t)
		closeA := s.Open(sb)
		closeB := s.Open(sb)
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if !status(t, s, sb).Live {
			t.Fatal("want live with two open connections")
		}
		closeA()
		closeA() // idempotent
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if !status(t, s, sb).Live {
			t.Fatal("want live with one open connection left")
		}
		closeB()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if got := status(t, s, sb); got.Live || got.LastSeen.IsZero() {
			t.Fatalf("after close got %+v, want not live, seen", got)
		}
	})

	t.Run("publish reaches subscriber", func(t *testing.T) {
		t.Parallel()
		s := newStore(t)
		sb, other := id(t), id(t)
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
