package slots

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestLimit(t *testing.T) {
	t.Parallel()
	l := New(2)
	for i := range 2 {
		if !l.Acquire("a") {
			t.Fatalf("claim %d of 2 on a was refused", i+1)
		}
	}
	if l.Acquire("a") {
		t.Fatal("a third claim on a was granted, over the limit of 2")
	}
	if !l.Acquire("b") {
		t.Fatal("b was refused while only a is full")
	}
	l.Release("a")
	if !l.Acquire("a") {
		t.Fatal("a claim on a was refused after a release")
	}
	l.Release("a")
	l.Release("a")
	l.Release("b")
	if n := len(l.held); n != 0 {
		t.Fatalf("%d keys kept after every slot was released, want none", n)
	}
}

// TestLimitConcurrent: claims racing for one key never exceed the limit.
func TestLimitConcurrent(t *testing.T) {
	t.Parallel()
	const limit = 3
	l := New(limit)
	var wg sync.WaitGroup
	var held, peak atomic.Int64
	for range 50 {
		wg.Go(func() {
			if !l.Acquire("k") {
				return
			}
			n := held.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			held.Add(-1)
			l.Release("k")
		})
	}
	wg.Wait()
	if p := peak.Load(); p > limit {
		t.Fatalf("peak %d claims held, want at most %d", p, limit)
	}
	if n := len(l.held); n != 0 {
		t.Fatalf("%d keys kept after every claim was released", n)
	}
}
