package fanout

import "testing"

func TestNotifyReachesOnlyThatKey(t *testing.T) {
	var h Hub
	a, cancelA := h.Subscribe("a")
	b, cancelB := h.Subscribe("b")
	defer cancelB()
	h.Notify("a")
	h.Notify("a") // coalesced, must not block
	select {
	case <-a:
	default:
		t.Fatal("subscriber of a got no signal")
	}
	select {
	case <-a:
		t.Fatal("two notifies gave two signals; want one coalesced")
	default:
	}
	select {
	case <-b:
		t.Fatal("subscriber of b got a's signal")
	default:
	}
	h.NotifyAll()
	if len(b) != 1 {
		t.Fatal("NotifyAll missed b")
	}
	cancelA()
	cancelA() // idempotent
	if got := h.Subscribers(); got != 1 {
		t.Fatalf("Subscribers() = %d after cancel, want 1", got)
	}
}
