// Package memstore is the in-memory activity store for `sbx dev` and
// single-process tests: marks and connections live in this process only,
// and notifications reach only this process's subscribers. Each store is
// its own epoch, begun when it was made: a restarted process knows nothing
// of the activity before it.
package memstore

import (
	"context"
	"crypto/rand"
	"sync"
	"time"

	"github.com/sbxedge/sbx/activity"
)

var _ activity.Store = (*Store)(nil)

// Store implements activity.Store in memory. Writes are a map update under
// a mutex, cheap enough that nothing is coalesced.
type Store struct {
	now    func() time.Time
	fanout activity.Fanout
	epoch  string
	start  time.Time

	mu     sync.Mutex // guards seen, open, closed
	seen   map[string]time.Time
	open   map[string]int
	closed bool
}

// New returns an empty store. now is the clock (nil: time.Now).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{
		now: now, epoch: rand.Text(), start: now(),
		seen: map[string]time.Time{}, open: map[string]int{},
	}
}

// Mark records use of id now.
func (s *Store) Mark(id string) {
	t := s.now()
	s.mu.Lock()
	if t.After(s.seen[id]) {
		s.seen[id] = t
	}
	s.mu.Unlock()
}

// Open counts a connection to id until close is called.
func (s *Store) Open(id string) func() {
	s.Mark(id)
	s.mu.Lock()
	s.open[id]++
	s.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			s.Mark(id)
			s.mu.Lock()
			if s.open[id]--; s.open[id] <= 0 {
				delete(s.open, id)
			}
			s.mu.Unlock()
		})
	}
}

// Status reads ids.
func (s *Store) Status(_ context.Context, ids []string) (map[string]activity.Status, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, activity.ErrClosed
	}
	out := make(map[string]activity.Status, len(ids))
	for _, id := range ids {
		out[id] = activity.Status{LastSeen: s.seen[id], Live: s.open[id] > 0, Epoch: s.epoch, EpochStart: s.start}
	}
	return out, nil
}

// Flush has nothing to push.
func (s *Store) Flush(context.Context) error { return nil }

// Publish notifies this process's subscribers of id.
func (s *Store) Publish(_ context.Context, id string) error {
	s.fanout.Notify(id)
	return nil
}

// Subscribe registers for notifications about id.
func (s *Store) Subscribe(id string) (<-chan struct{}, func()) { return s.fanout.Subscribe(id) }

// Close makes later reads fail.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}
