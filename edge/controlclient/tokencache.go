package controlclient

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Token answers are cached so that a private preview's requests do not
// each ask control whose token they carry: that round trip was most of
// a private request's cost (3,553 req/s against 9,110 on a public port).
const (
	// tokenCacheTTL bounds how long an answer is used without asking
	// again: a revocation whose invalidation was lost (Redis down) and a
	// token's expiry are honoured within it, as the proxy's cached routes
	// are within its RouteTTL.
	tokenCacheTTL = 5 * time.Second
	// tokenCacheSize bounds the memory: one entry is a hash and an
	// account ID.
	tokenCacheSize = 10_000
	// tokenLookupTimeout bounds one lookup shared by many waiting
	// requests; it is detached from any one caller's context so a client
	// that hangs up does not fail the others.
	tokenLookupTimeout = 10 * time.Second
)

// tokenCache remembers which account an agent token belongs to. It is
// keyed by the token's SHA-256, so the secret itself is never kept; only
// admissions are kept (a refused or unknown token asks control every time,
// as before, and cannot push good entries out). Concurrent misses for one
// token share one call.
//
// mu makes invalidate and a lookup's store atomic with respect to each
// other: gen counts invalidations, so an answer fetched before one is
// neither stored nor handed to a caller that arrived after it.
type tokenCache struct {
	ask    func(ctx context.Context, secret string) (string, error)
	ttl    time.Duration
	now    func() time.Time
	lru    *lru.Cache[[sha256.Size]byte, tokenEntry]
	flight singleflight.Group

	mu  sync.Mutex
	gen uint64
}

type tokenEntry struct {
	account string
	expires time.Time
}

func newTokenCache(ask func(context.Context, string) (string, error), ttl time.Duration, size int, now func() time.Time) (*tokenCache, error) {
	c, err := lru.New[[sha256.Size]byte, tokenEntry](size)
	if err != nil {
		return nil, fmt.Errorf("token cache: %w", err)
	}
	return &tokenCache{ask: ask, ttl: ttl, now: now, lru: c}, nil
}

// account answers from the cache when it can, else asks once for every
// concurrent caller with the same token.
func (c *tokenCache) account(ctx context.Context, secret string) (string, error) {
	k := sha256.Sum256([]byte(secret))
	if e, ok := c.lru.Get(k); ok {
		if c.now().Before(e.expires) {
			return e.account, nil
		}
		c.lru.Remove(k)
	}
	c.mu.Lock()
	gen := c.gen
	c.mu.Unlock()
	// The generation is part of the flight's key: a caller that arrives
	// after an invalidation never joins a lookup begun before it.
	ch := c.flight.DoChan(fmt.Sprintf("%x/%d", k, gen), func() (any, error) {
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tokenLookupTimeout)
		defer cancel()
		acct, err := c.ask(lctx, secret)
		if err == nil {
			c.store(k, gen, acct)
		}
		return acct, err
	})
	select {
	case res := <-ch:
		acct, _ := res.Val.(string)
		return acct, res.Err
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

func (c *tokenCache) store(k [sha256.Size]byte, gen uint64, account string) {
	e := tokenEntry{account: account, expires: c.now().Add(c.ttl)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.lru.Add(k, e)
	}
}

// invalidate forgets the answers a token invalidation may have made
// wrong: every token of inv.AccountID (of every account when it is
// empty), and any lookup in flight. A kind it does not know clears
// everything rather than miss what a newer control meant.
func (c *tokenCache) invalidate(inv edgeapi.Invalidation) {
	switch inv.Kind {
	case edgeapi.InvalidatePort, edgeapi.InvalidateSandbox, edgeapi.InvalidateMembers:
		return // they change routes and memberships, not whose a token is
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	if inv.Kind != edgeapi.InvalidateToken || inv.AccountID == "" {
		c.lru.Purge()
		return
	}
	for _, k := range c.lru.Keys() {
		if e, ok := c.lru.Peek(k); ok && e.account == inv.AccountID {
			c.lru.Remove(k)
		}
	}
}
