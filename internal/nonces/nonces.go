// Package nonces records used one-time nonces in one process: the
// in-memory store behind the API's stream tickets and the preview's login
// tickets (sbx dev, tests). A deployment with replicas shares a store
// instead (Redis), or a nonce could be replayed on another replica.
package nonces

import (
	"context"
	"sync"
	"time"
)

// Memory is an in-process record of redeemed nonces.
type Memory struct {
	now  func() time.Time
	mu   sync.Mutex // guards seen
	seen map[string]time.Time
}

// NewMemory returns an empty record; now nil is time.Now.
func NewMemory(now func() time.Time) *Memory {
	if now == nil {
		now = time.Now
	}
	return &Memory{now: now, seen: map[string]time.Time{}}
}

// Redeem marks nonce used for ttl and reports whether this call was the
// first to do so. Expired entries are dropped as it goes.
func (m *Memory) Redeem(_ context.Context, nonce string, ttl time.Duration) (bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, exp := range m.seen {
		if now.After(exp) {
			delete(m.seen, n)
		}
	}
	if _, ok := m.seen[nonce]; ok {
		return false, nil
	}
	m.seen[nonce] = now.Add(ttl)
	return true, nil
}
