// Package slots caps how many claims each key holds at once: the SSH
// broker's connections per sandbox and the preview proxy's requests in
// flight per host.
package slots

import "sync"

// Limit counts claims per key, at most max at once. The zero value is not
// usable; make one with New.
type Limit struct {
	max int

	mu   sync.Mutex // guards held
	held map[string]int
}

// New returns a Limit of max claims per key.
func New(max int) *Limit {
	return &Limit{max: max, held: map[string]int{}}
}

// Acquire claims one of key's slots, or reports false when all are held.
func (l *Limit) Acquire(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key] >= l.max {
		return false
	}
	l.held[key]++
	return true
}

// Release gives back a slot Acquire claimed; a key with none left is
// forgotten, so the map holds only keys in use.
func (l *Limit) Release(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.held[key]--; l.held[key] <= 0 {
		delete(l.held, key)
	}
}
