// Package eventhub fans "sandbox X has new events" signals out to the
// streams waiting on X. A signal carries no data: subscribers re-read the
// store, which stays the one source of truth, so a coalesced or spurious
// signal costs a query and never loses an event.
package eventhub

import "sync"

// Hub is safe for concurrent use. The zero value is ready.
type Hub struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel signalled after each Publish(sandboxID) and
// a cancel func that must be called once the channel is no longer read.
func (h *Hub) Subscribe(sandboxID string) (<-chan struct{}, func()) {
	// Buffer 1: Publish never blocks, and a signal arriving while the
	// subscriber is busy is kept (coalesced with later ones).
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]map[chan struct{}]struct{}{}
	}
	set := h.subs[sandboxID]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.subs[sandboxID] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			// set is still h.subs[sandboxID]: a set leaves the map only
			// once empty, and it held ch until now.
			delete(set, ch)
			if len(set) == 0 {
				delete(h.subs, sandboxID)
			}
			h.mu.Unlock()
		})
	}
}

// Publish signals every subscriber of sandboxID without blocking.
func (h *Hub) Publish(sandboxID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[sandboxID] {
		signal(ch)
	}
}

// PublishAll signals every subscriber, e.g. after a notification
// connection was lost and signals may have been missed.
func (h *Hub) PublishAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, set := range h.subs {
		for ch := range set {
			signal(ch)
		}
	}
}

// Subscribers counts subscriptions, for tests.
func (h *Hub) Subscribers() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, set := range h.subs {
		n += len(set)
	}
	return n
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
