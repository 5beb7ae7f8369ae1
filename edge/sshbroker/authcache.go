package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// authLookupTimeout bounds one Authorizer call made on behalf of possibly
// many waiting connections; it is detached from any one caller's context so
// a client that hangs up does not fail the others sharing the lookup.
const authLookupTimeout = 10 * time.Second

// cacheableRefusals are the answers worth remembering for a moment: they
// describe the credential, not the moment. ErrNotReady and control faults
// are never cached, so a sandbox that wakes up is reachable at once.
var cacheableRefusals = []error{ErrUnknownKey, ErrExpired, ErrSandboxEnded, ErrWrongSandbox, ErrUnknownSandbox}

type authKey struct{ user, fp string }

type authEntry struct {
	route   Route
	err     error
	expires time.Time
}

// authCache wraps an Authorizer with a bounded LRU of recent answers, so a
// burst of connections (50 parallel sessions, a VS Code reconnect storm)
// asks control once, and concurrent identical lookups share one call.
// Accepted routes are kept for ttl but never past the credential's own
// expiry; refusals for refusalTTL.
type authCache struct {
	inner      Authorizer
	ttl        time.Duration
	refusalTTL time.Duration
	now        func() time.Time
	lru        *lru.Cache[authKey, authEntry]
	flight     singleflight.Group
	m          *metrics

	// mu makes Invalidate and a lookup's store atomic with respect to each
	// other: gen counts invalidations so an answer fetched before one is
	// not stored after it.
	mu  sync.Mutex
	gen uint64
}

func newAuthCache(inner Authorizer, ttl, refusalTTL time.Duration, size int, m *metrics) (*authCache, error) {
	c, err := lru.New[authKey, authEntry](size)
	if err != nil {
		return nil, fmt.Errorf("auth cache: %w", err)
	}
	return &authCache{inner: inner, ttl: ttl, refusalTTL: refusalTTL, now: time.Now, lru: c, m: m}, nil
}

// Authorize answers from the cache when it can, else asks inner once for
// all concurrent callers with the same (username, fingerprint).
func (c *authCache) Authorize(ctx context.Context, username, fp string) (Route, error) {
	k := authKey{username, fp}
	if e, ok := c.lru.Get(k); ok {
		if c.now().Before(e.expires) {
			c.m.authCache.WithLabelValues("hit").Inc()
			return e.route, e.err
		}
		c.lru.Remove(k)
	}
	c.m.authCache.WithLabelValues("miss").Inc()
	ch := c.flight.DoChan(username+"\x00"+fp, func() (any, error) {
		// A flight that ended between this caller's miss above and its
		// DoChan has stored its answer: use it rather than ask again.
		if e, ok := c.lru.Get(k); ok && c.now().Before(e.expires) {
			return e.route, e.err
		}
		c.mu.Lock()
		gen := c.gen
		c.mu.Unlock()
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), authLookupTimeout)
		defer cancel()
		route, err := c.inner.Authorize(lctx, username, fp)
		c.store(k, gen, route, err)
		return route, err
	})
	select {
	case res := <-ch:
		route, _ := res.Val.(Route)
		return route, res.Err
	case <-ctx.Done():
		return Route{}, context.Cause(ctx)
	}
}

func (c *authCache) store(k authKey, gen uint64, route Route, err error) {
	now := c.now()
	e := authEntry{route: route, err: err}
	switch {
	case err == nil:
		e.expires = now.Add(c.ttl)
		if !route.ExpiresAt.IsZero() && route.ExpiresAt.Before(e.expires) {
			e.expires = route.ExpiresAt
		}
	case isCacheableRefusal(err):
		e.expires = now.Add(c.refusalTTL)
	default:
		return
	}
	if !now.Before(e.expires) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen == c.gen {
		c.lru.Add(k, e)
	}
}

func isCacheableRefusal(err error) bool {
	for _, r := range cacheableRefusals {
		if errors.Is(err, r) {
			return true
		}
	}
	return false
}

// Clear forgets every answer and any lookup in flight: invalidations may
// have been missed.
func (c *authCache) Clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.lru.Purge()
}

// Invalidate forgets every answer about sandboxID (asked for by that ID,
// or by a name that led to it), and any lookup in flight, so a deleted
// sandbox's or revoked credential's cached route does not admit new
// connections.
func (c *authCache) Invalidate(sandboxID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	for _, k := range c.lru.Keys() {
		// The username may be the sandbox's name: an accepted route
		// cached under it is found by the ID control resolved it to.
		if e, ok := c.lru.Peek(k); k.user == sandboxID || ok && e.route.SandboxID == sandboxID {
			c.lru.Remove(k)
		}
	}
}
