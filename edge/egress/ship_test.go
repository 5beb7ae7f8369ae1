package egress

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestShipper: every decision recorded reaches send, in batches no larger
// than asked and in the order recorded; those without a sandbox are not
// shipped; a failed batch does not stop the next; Stop sends what is
// left.
func TestShipper(t *testing.T) {
	var mu sync.Mutex
	var got []Decision
	var sizes []int
	fail := true
	send := func(_ context.Context, b []Decision) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			fail = false
			return errors.New("control is away")
		}
		got = append(got, b...)
		sizes = append(sizes, len(b))
		return nil
	}
	s := NewShipper(send, 10, 10*time.Millisecond, nil)
	s.Record(Decision{SandboxID: "sbx-lost", Port: 1}) // the failed batch
	s.Start()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		f := fail
		mu.Unlock()
		if !f || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.Record(Decision{Port: 9}) // no sandbox
	for i := range 35 {
		s.Record(Decision{SandboxID: "sbx-a", Port: uint16(100 + i)})
	}
	s.Stop(context.Background())
	s.Stop(context.Background()) // idempotent

	mu.Lock()
	defer mu.Unlock()
	if len(got) != 35 {
		t.Fatalf("shipped %d decisions, want 35 (of sbx-a)", len(got))
	}
	for i, d := range got {
		if d.Port != uint16(100+i) {
			t.Fatalf("decision %d has port %d: order lost", i, d.Port)
		}
	}
	for _, n := range sizes {
		if n > 10 {
			t.Errorf("a batch of %d, want at most 10", n)
		}
	}
}
