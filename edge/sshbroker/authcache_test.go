package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// countingAuth answers from a table and counts calls; gate, when set,
// holds every call until closed.
type countingAuth struct {
	calls atomic.Int64
	gate  chan struct{}
	mu    sync.Mutex
	ans   map[string]authEntry
}

func (c *countingAuth) Authorize(ctx context.Context, user, fp string) (Route, error) {
	c.calls.Add(1)
	if c.gate != nil {
		select {
		case <-c.gate:
		case <-ctx.Done():
			return Route{}, ctx.Err()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.ans[fp]
	if !ok {
		return Route{}, ErrUnknownKey
	}
	return e.route, e.err
}

func (c *countingAuth) set(fp string, r Route, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ans[fp] = authEntry{route: r, err: err}
}

func newTestCache(t *testing.T, inner Authorizer) (*authCache, *time.Time) {
	t.Helper()
	m, err := newMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := newAuthCache(inner, 10*time.Second, 2*time.Second, 3, m)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	return c, &now
}

func TestAuthCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cases := []struct {
		name      string
		route     Route
		err       error
		advance   time.Duration
		wantCalls int64
	}{
		{"accepted, within ttl", Route{SandboxID: "sb", ExpiresAt: base.Add(time.Hour)}, nil, 9 * time.Second, 1},
		{"accepted, past ttl", Route{SandboxID: "sb", ExpiresAt: base.Add(time.Hour)}, nil, 11 * time.Second, 2},
		{"accepted, past credential expiry", Route{SandboxID: "sb", ExpiresAt: base.Add(3 * time.Second)}, nil, 4 * time.Second, 2},
		{"unknown key, within refusal ttl", Route{}, ErrUnknownKey, time.Second, 1},
		{"unknown key, past refusal ttl", Route{}, ErrUnknownKey, 3 * time.Second, 2},
		{"expired, within refusal ttl", Route{}, fmt.Errorf("x: %w", ErrExpired), time.Second, 1},
		{"not ready is never cached", Route{}, fmt.Errorf("suspended: %w", ErrNotReady), 0, 2},
		{"control fault is never cached", Route{}, errors.New("control down"), 0, 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			inner := &countingAuth{ans: map[string]authEntry{}}
			inner.set("fp", tc.route, tc.err)
			c, now := newTestCache(t, inner)
			for range 2 {
				r, err := c.Authorize(ctx, "sb", "fp")
				if !errors.Is(err, tc.err) || r.SandboxID != tc.route.SandboxID {
					t.Fatalf("Authorize = %+v, %v; want %+v, %v", r, err, tc.route, tc.err)
				}
				*now = now.Add(tc.advance)
			}
			if got := inner.calls.Load(); got != tc.wantCalls {
				t.Fatalf("inner calls %d, want %d", got, tc.wantCalls)
			}
		})
	}
}

func TestAuthCacheBoundedAndKeyed(t *testing.T) {
	t.Parallel()
	inner := &countingAuth{ans: map[string]authEntry{}}
	route := Route{SandboxID: "sb", ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	for i := range 5 {
		inner.set(fmt.Sprint("fp", i), route, nil)
	}
	c, _ := newTestCache(t, inner)
	ctx := context.Background()
	for i := range 5 {
		if _, err := c.Authorize(ctx, "sb", fmt.Sprint("fp", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.lru.Len(); n != 3 {
		t.Fatalf("cache holds %d entries, want the bound 3", n)
	}
	// The username is part of the key: the same key for another sandbox
	// is a new question, never a cached yes.
	inner.calls.Store(0)
	if _, err := c.Authorize(ctx, "other", "fp4"); err != nil {
		t.Fatal(err)
	}
	if inner.calls.Load() != 1 {
		t.Fatal("a cached answer for sandbox sb was reused for sandbox other")
	}
}

func TestAuthCacheInvalidate(t *testing.T) {
	t.Parallel()
	inner := &countingAuth{ans: map[string]authEntry{}}
	inner.set("fp", Route{SandboxID: "sb", ExpiresAt: time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}, nil)
	c, _ := newTestCache(t, inner)
	ctx := context.Background()
	if _, err := c.Authorize(ctx, "sb", "fp"); err != nil {
		t.Fatal(err)
	}
	inner.set("fp", Route{}, ErrSandboxEnded)
	c.Invalidate("sb")
	if _, err := c.Authorize(ctx, "sb", "fp"); !errors.Is(err, ErrSandboxEnded) {
		t.Fatalf("after Invalidate: %v, want ErrSandboxEnded", err)
	}
}

// Concurrent identical lookups share one call, and a caller that gives up
// does not fail the others.
func TestAuthCacheCollapsesConcurrentLookups(t *testing.T) {
	t.Parallel()
	inner := &countingAuth{ans: map[string]authEntry{}, gate: make(chan struct{})}
	inner.set("fp", Route{SandboxID: "sb", ExpiresAt: time.Now().Add(time.Hour)}, nil)
	c, _ := newTestCache(t, inner)
	impatient, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := c.Authorize(impatient, "sb", "fp")
		first <- err
	}()
	for inner.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.Authorize(context.Background(), "sb", "fp")
			errs <- err
		}()
	}
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v, want context.Canceled", err)
	}
	close(inner.gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("patient caller failed: %v", err)
		}
	}
	if n := inner.calls.Load(); n != 1 {
		t.Fatalf("inner called %d times for 51 concurrent lookups, want 1", n)
	}
}
