package egress

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"sync"
	"time"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// Cache keeps a Sandboxes' answers for a short TTL, so a build that
// opens hundreds of connections asks control once, while a new policy
// still reaches new connections within the TTL. Refusals are not kept:
// a sandbox's credential must work the moment it is minted.
type Cache struct {
	src Sandboxes
	ttl time.Duration
	now func() time.Time

	mu      sync.Mutex // guards entries
	entries map[string]cacheEntry
}

type cacheEntry struct {
	sum    [sha256.Size]byte // of the secret the answer was for
	policy *egresspolicy.Policy
	at     time.Time
}

// NewCache caches src's answers for ttl (default 2 s). now defaults to
// time.Now.
func NewCache(src Sandboxes, ttl time.Duration, now func() time.Time) *Cache {
	if ttl <= 0 {
		ttl = 2 * time.Second
	}
	if now == nil {
		now = time.Now
	}
	return &Cache{src: src, ttl: ttl, now: now, entries: map[string]cacheEntry{}}
}

var _ Sandboxes = (*Cache)(nil)

// EgressPolicy answers from the cache when it holds a fresh answer for
// this very secret, else asks the source.
func (c *Cache) EgressPolicy(ctx context.Context, sandboxID, secret string) (*egresspolicy.Policy, error) {
	sum := sha256.Sum256([]byte(secret))
	c.mu.Lock()
	e, ok := c.entries[sandboxID]
	c.mu.Unlock()
	if ok && subtle.ConstantTimeCompare(e.sum[:], sum[:]) == 1 && c.now().Sub(e.at) < c.ttl {
		return e.policy, nil
	}
	p, err := c.src.EgressPolicy(ctx, sandboxID, secret)
	if err != nil {
		if errors.Is(err, ErrUnauthorized) {
			c.Forget(sandboxID)
		}
		return nil, err
	}
	c.mu.Lock()
	c.entries[sandboxID] = cacheEntry{sum: sum, policy: p, at: c.now()}
	c.mu.Unlock()
	return p, nil
}

// Forget drops a sandbox's answer, so the next request asks the source.
func (c *Cache) Forget(sandboxID string) {
	c.mu.Lock()
	delete(c.entries, sandboxID)
	c.mu.Unlock()
}
