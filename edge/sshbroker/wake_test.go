package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/closedport"
)

// fakeWaker makes a not-ready credential live after a delay, as control's
// restore would, or fails.
type fakeWaker struct {
	e     *env
	calls atomic.Int32
	fail  bool
}

func (w *fakeWaker) Wake(ctx context.Context, id string) error {
	w.calls.Add(1)
	if w.fail {
		return errors.New("injected: restore failed")
	}
	select {
	case <-time.After(300 * time.Millisecond):
	case <-ctx.Done():
		return ctx.Err()
	}
	w.e.wakeUp(id)
	return nil
}

// wakeUp makes the credentials of sandbox id live, as control's restore
// does: no refusal, and the route at the upstream, where a restore that
// moved the sandbox put it.
func (e *env) wakeUp(id string) {
	e.auth.mu.Lock()
	defer e.auth.mu.Unlock()
	for fp, c := range e.auth.creds {
		if c.username == id {
			c.err, c.route.Addr = nil, e.up.Addr
			e.auth.creds[fp] = c
		}
	}
}

// TestWakeOnConnect: a key holder connecting to a suspended sandbox is told
// it is waking (OpenSSH prints the userauth banner on stderr), waits, and
// is relayed; a stranger causes no wake and learns nothing.
func TestWakeOnConnect(t *testing.T) {
	w := &fakeWaker{}
	e := newEnv(t, func(c *Config) { c.Waker = w })
	w.e = e
	stranger := e.newKey("stranger")
	r := run(t, e.ssh(testCtx(t, sshCeiling), stranger, "sleepy", nil, "echo in"), nil)
	if r.code != 255 || strings.Contains(r.stderr, "sbx:") {
		t.Fatalf("stranger: code %d stderr %q, want a silent refusal", r.code, r.stderr)
	}
	k := e.grant("sleepy", ErrNotReady)
	if w.calls.Load() != 0 {
		t.Fatal("an unauthenticated client caused a wake")
	}
	r = run(t, e.ssh(testCtx(t, sshCeiling), k, "sleepy", nil, "echo woke"), nil)
	if r.code != 0 || r.stdout != "woke\n" {
		t.Fatalf("code %d stdout %q stderr %q, want woke", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "sbx: waking sandbox sleepy") {
		t.Fatalf("stderr %q, want the waking message", r.stderr)
	}
	if n := w.calls.Load(); n != 1 {
		t.Fatalf("wake called %d times, want 1", n)
	}
}

func TestWakeFailureIsExplained(t *testing.T) {
	w := &fakeWaker{fail: true}
	e := newEnv(t, func(c *Config) { c.Waker = w })
	w.e = e
	k := e.grant("broken", ErrNotReady)
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "broken", nil, "echo in"), nil)
	if r.code != 255 || !strings.Contains(r.stderr, "could not be woken") {
		t.Fatalf("code %d stderr %q, want 255 and the wake failure explained", r.code, r.stderr)
	}
}

// Without a Waker a not-ready sandbox is refused as before.
func TestNotReadyWithoutWaker(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("sleepy", ErrNotReady)
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "sleepy", nil, "echo in"), nil)
	if r.code != 255 || strings.Contains(r.stderr, "waking") {
		t.Fatalf("code %d stderr %q, want a refusal without wake", r.code, r.stderr)
	}
}

// restoringWaker points the sandbox's credential at the live upstream, as
// a restore that moved the sandbox would.
type restoringWaker struct {
	e     *env
	calls atomic.Int32
}

func (w *restoringWaker) Wake(_ context.Context, id string) error {
	w.calls.Add(1)
	w.e.wakeUp(id)
	return nil
}

// TestStaleCachedRouteWakes: a route cached while the sandbox ran can
// outlive its pod; the failed dial sends the broker back to the
// Authorizer, which now says not ready, and the connection wakes it.
func TestStaleCachedRouteWakes(t *testing.T) {
	w := &restoringWaker{}
	e := newEnv(t, func(c *Config) { c.Waker = w })
	w.e = e
	k := e.grant("moved", nil)
	dead := fmt.Sprintf("127.0.0.1:%d", closedport.New(t).N) // nothing listens there
	e.auth.update(k.fp, func(c *cred) { c.route.Addr = dead })
	// Cached: a route to a pod that is gone.
	if r := run(t, e.ssh(testCtx(t, sshCeiling), k, "moved", nil, "echo in"), nil); r.code != 255 {
		t.Fatalf("dial to a dead pod: code %d, want 255", r.code)
	}
	e.auth.update(k.fp, func(c *cred) { c.err = ErrNotReady }) // suspended since
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "moved", nil, "echo woke"), nil)
	if r.code != 0 || r.stdout != "woke\n" || !strings.Contains(r.stderr, "waking sandbox moved") {
		t.Fatalf("code %d stdout %q stderr %q, want woke after the stale route", r.code, r.stdout, r.stderr)
	}
	if n := w.calls.Load(); n != 1 {
		t.Fatalf("wake called %d times, want 1", n)
	}
}

// TestStaleCachedRouteOfEndedSandbox: a route cached while the sandbox ran
// outlives its deletion; the failed dial sends the broker back to the
// Authorizer, and the key holder is told the sandbox ended, not to retry.
func TestStaleCachedRouteOfEndedSandbox(t *testing.T) {
	w := &restoringWaker{}
	e := newEnv(t, func(c *Config) { c.Waker = w })
	w.e = e
	k := e.grant("deleted", nil)
	// Cached by a connection while the sandbox ran.
	if r := run(t, e.ssh(testCtx(t, sshCeiling), k, "deleted", nil, "true"), nil); r.code != 0 {
		t.Fatalf("first connection: code %d stderr %q, want 0", r.code, r.stderr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	// Deleted since: control now refuses the key, and the pod is gone
	// (the fake answers from the cache's copy until the broker asks).
	e.auth.update(k.fp, func(c *cred) { c.err = ErrSandboxEnded })
	e.broker.cache.mu.Lock()
	ak := authKey{"deleted", k.fp}
	entry, ok := e.broker.cache.lru.Get(ak)
	if !ok {
		e.broker.cache.mu.Unlock()
		t.Fatal("the first connection's route was not cached")
	}
	entry.route.Addr = dead
	e.broker.cache.lru.Add(ak, entry)
	e.broker.cache.mu.Unlock()

	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "deleted", nil, "echo in"), nil)
	if r.code != 255 || !strings.Contains(r.stderr, "sandbox deleted has ended") || strings.Contains(r.stderr, "try again") {
		t.Fatalf("code %d stderr %q, want 255 and the sandbox's end explained", r.code, r.stderr)
	}
	if n := w.calls.Load(); n != 0 {
		t.Fatalf("wake called %d times for an ended sandbox, want 0", n)
	}
}
