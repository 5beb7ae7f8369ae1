// Package preview is the edge's preview proxy: it serves
// <label>.preview.<domain> by forwarding to <port> on the loopback inside the
// sandbox, over a direct-tcpip channel on the pooled SSH connection to the
// sandbox's sshd. The address dialled comes only from control's route for
// the label, never from the request. Private ports sit behind an auth
// wrapper (OIDC login and a per-host cookie, or an account token), and
// nothing reaches or wakes a sandbox before the caller is authorised.
package preview

import (
	"context"
	"errors"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

// Route is where a preview host leads.
type Route struct {
	SandboxID string
	AccountID string
	// Port is the port inside the sandbox, dialled on 127.0.0.1, then ::1.
	Port int
	// PortLabel is the port's name ("web"), shown on the pages.
	PortLabel string
	// Public ports skip the auth wrapper.
	Public bool
	// RewriteHost sends Host: localhost:<Port> instead of the preview host.
	RewriteHost bool
	// Ready is true when the sandbox has a running server; Target is set
	// only then. Otherwise the proxy asks the Waker and resolves again.
	Ready  bool
	Target podssh.Target
	// Admission is control's answer when the route is not Ready: a
	// starting sandbox is waited for, a wakeable one woken; the waking
	// page names which. Empty (an older control) reads as wakeable.
	Admission edgeapi.Admission

	// upstream is upstreamKey of a ready route, computed once when the
	// route is cached rather than per request.
	upstream string
}

// ErrUnknownHost is what a Resolver returns for a label that leads nowhere
// (never existed, or removed).
var ErrUnknownHost = edgeapi.ErrPreviewUnknownHost

// ErrHostEnded is what a Resolver returns for a label whose sandbox
// ended. The route cache answers it joined with ErrUnknownHost, so that
// everything that drops an unknown host (connections, certificates,
// sign-in) drops it too, and only the answer to the request tells them
// apart.
var ErrHostEnded = edgeapi.ErrPreviewSandboxEnded

// errHostEnded is the cache's answer for an ended label.
var errHostEnded = errors.Join(ErrUnknownHost, ErrHostEnded)

// Resolver maps a host label to its route. Implementations talk to
// control; the proxy caches their answers briefly.
type Resolver interface {
	Resolve(ctx context.Context, label string) (Route, error)
}

// Activity is told when a sandbox is in use: Mark per request, Open per
// WebSocket for as long as it is open. Must not block.
type Activity interface {
	Mark(sandboxID string)
	Open(sandboxID string) (close func())
}

// Waker restores a suspended sandbox and blocks until it is ready, ctx
// ends, or it cannot be woken. Idempotent under concurrent callers.
type Waker interface {
	Wake(ctx context.Context, sandboxID string) error
}

type nopActivity struct{}

func (nopActivity) Mark(string)                {}
func (nopActivity) Open(string) (close func()) { return func() {} }

type nopWaker struct{}

func (nopWaker) Wake(context.Context, string) error { return nil }

// routeCache holds resolved routes for ttl and unknown labels for negTTL,
// so a burst of requests to one host costs one control lookup, and a flood
// of random hosts cannot grow memory without bound.
type routeCache struct {
	res         Resolver
	ttl, negTTL time.Duration
	max         int
	now         func() time.Time
	group       singleflight.Group

	mu      sync.Mutex // guards entries and gen
	entries map[string]cacheEntry
	gen     map[string]uint64 // bumped by Invalidate; a lookup started before is not stored
}

type cacheEntry struct {
	route   Route
	unknown bool
	ended   bool // with unknown: the label's sandbox ended
	expires time.Time
}

func newRouteCache(res Resolver, ttl, negTTL time.Duration, max int) *routeCache {
	return &routeCache{res: res, ttl: ttl, negTTL: negTTL, max: max, now: time.Now,
		entries: map[string]cacheEntry{}, gen: map[string]uint64{}}
}

func (c *routeCache) get(ctx context.Context, label string) (Route, error) {
	c.mu.Lock()
	e, ok := c.entries[label]
	gen := c.gen[label]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		switch {
		case e.ended:
			return Route{}, errHostEnded
		case e.unknown:
			return Route{}, ErrUnknownHost
		}
		return e.route, nil
	}
	v, err, _ := c.group.Do(label, func() (any, error) {
		// Detached from the first caller's cancellation: the others
		// waiting on this lookup still want the answer.
		lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		rt, err := c.res.Resolve(lctx, label)
		if err == nil && rt.Ready {
			rt.upstream = upstreamKey(rt)
		}
		ended := errors.Is(err, ErrHostEnded)
		if ended {
			err = errHostEnded
		}
		unknown := errors.Is(err, ErrUnknownHost)
		if err != nil && !unknown {
			return Route{}, err // control faults are not cached
		}
		ttl := c.ttl
		if unknown || !rt.Ready {
			ttl = c.negTTL // a waking sandbox should be seen ready soon
		}
		c.mu.Lock()
		if c.gen[label] == gen {
			if len(c.entries) >= c.max {
				clear(c.entries) // crude, but bounded and rare
			}
			c.entries[label] = cacheEntry{route: rt, unknown: unknown, ended: ended, expires: c.now().Add(ttl)}
		}
		c.mu.Unlock()
		return rt, err
	})
	if err != nil {
		return Route{}, err
	}
	return v.(Route), nil
}

// Invalidate drops label now; a lookup already in flight is not cached.
func (c *routeCache) Invalidate(label string) {
	c.mu.Lock()
	delete(c.entries, label)
	c.gen[label]++
	if len(c.gen) > c.max {
		clear(c.gen)
	}
	c.mu.Unlock()
	c.group.Forget(label)
}

// clear drops every label, as Invalidate does one: invalidations may have
// been missed, so no cached route is trusted.
func (c *routeCache) clear() {
	c.mu.Lock()
	labels := make([]string, 0, len(c.entries))
	for l := range c.entries {
		labels = append(labels, l)
	}
	c.mu.Unlock()
	for _, l := range labels {
		c.Invalidate(l)
	}
}

// invalidateSandbox drops every label that leads to sandboxID.
func (c *routeCache) invalidateSandbox(sandboxID string) {
	c.mu.Lock()
	var labels []string
	for l, e := range c.entries {
		if e.route.SandboxID == sandboxID {
			labels = append(labels, l)
		}
	}
	c.mu.Unlock()
	for _, l := range labels {
		c.Invalidate(l)
	}
}
