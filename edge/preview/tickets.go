package preview

import (
	"context"
	"sync"
	"time"
)

// Tickets records redeemed one-time login tickets. Every replica of the
// edge must share one, or a ticket (which lives ticketTTL and travels in
// a URL) could be replayed on another replica.
type Tickets interface {
	// Redeem atomically marks nonce used for ttl and reports whether this
	// call was the first to do so. An error means "unknown": the caller
	// refuses the ticket.
	Redeem(ctx context.Context, nonce string, ttl time.Duration) (bool, error)
}

// MemoryTickets is a Tickets for a single process (sbx dev, tests).
type MemoryTickets struct {
	now  func() time.Time
	mu   sync.Mutex // guards seen
	seen map[string]time.Time
}

// NewMemoryTickets returns an empty in-process ticket record.
func NewMemoryTickets(now func() time.Time) *MemoryTickets {
	if now == nil {
		now = time.Now
	}
	return &MemoryTickets{now: now, seen: map[string]time.Time{}}
}

// Redeem implements Tickets.
func (m *MemoryTickets) Redeem(_ context.Context, nonce string, ttl time.Duration) (bool, error) {
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
