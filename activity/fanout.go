package activity

import "sync"

// Fanout delivers notifications to this process's subscribers. Both stores
// use it: memstore directly, redisstore behind its Redis subscription.
type Fanout struct {
	mu   sync.Mutex // guards subs
	subs map[string]map[chan struct{}]struct{}
}

// Subscribe registers a subscriber for id. The channel holds one pending
// notification; further ones coalesce into it.
func (f *Fanout) Subscribe(id string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	f.mu.Lock()
	if f.subs == nil {
		f.subs = map[string]map[chan struct{}]struct{}{}
	}
	set := f.subs[id]
	if set == nil {
		set = map[chan struct{}]struct{}{}
		f.subs[id] = set
	}
	set[ch] = struct{}{}
	f.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			f.mu.Lock()
			defer f.mu.Unlock()
			delete(f.subs[id], ch)
			if len(f.subs[id]) == 0 {
				delete(f.subs, id)
			}
		})
	}
}

// Notify wakes every subscriber of id without blocking.
func (f *Fanout) Notify(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for ch := range f.subs[id] {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}
