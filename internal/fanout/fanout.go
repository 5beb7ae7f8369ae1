// Package fanout delivers keyed, data-free signals ("sandbox X changed")
// to this process's subscribers of that key. A signal carries nothing:
// subscribers re-read their source of truth, so a coalesced or spurious
// signal costs a read and never loses a change. The activity stores (wake
// notifications) and the control stores (event streams) share it.
package fanout

import "sync"

// Hub is safe for concurrent use. The zero value is ready.
type Hub struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe returns a channel signalled after each Notify(key) and a
// cancel func (idempotent) to call once the channel is no longer read.
func (h *Hub) Subscribe(key string) (<-chan struct{}, func()) {
	// Buffer 1: Notify never blocks, and a signal arriving while the
	// subscriber is busy is kept (coalesced with later ones).
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[string]map[chan struct{}]struct{}{}
	}
	set := h.subs[key]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		h.subs[key] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			// set is still h.subs[key]: a set leaves the map only once
			// empty, and it held ch until now.
			delete(set, ch)
			if len(set) == 0 {
				delete(h.subs, key)
			}
			h.mu.Unlock()
		})
	}
}

// Notify signals every subscriber of key without blocking.
func (h *Hub) Notify(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for ch := range h.subs[key] {
		signal(ch)
	}
}

// NotifyAll signals every subscriber, e.g. after a notification
// connection was lost and signals may have been missed.
func (h *Hub) NotifyAll() {
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
