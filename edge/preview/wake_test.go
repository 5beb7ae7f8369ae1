package preview_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/sbxedge/sbx/edge/preview"
)

// fakeWaker makes the suspended sandbox ready when asked, unless fail.
type fakeWaker struct {
	mu    sync.Mutex
	calls []string
	fail  bool
	wake  func()
}

func (f *fakeWaker) Wake(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, id)
	if f.fail {
		return errors.New("cannot restore")
	}
	f.wake()
	return nil
}

func (f *fakeWaker) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func TestWakeOnlyAfterAuthorisation(t *testing.T) {
	t.Parallel()
	w := &fakeWaker{}
	e := newEnv(t, newTestApp(), envOptions{waker: w})
	e.expose("sleepy", "sbx-a", "acct-a", false, false)
	ready, _ := e.res.Resolve(t.Context(), "sleepy")
	suspended := preview.Route{SandboxID: ready.SandboxID, AccountID: ready.AccountID, Port: ready.Port}
	e.res.set("sleepy", suspended)
	w.wake = func() { e.res.set("sleepy", ready) }

	// Strangers do not wake it.
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer " + tokenB}, {"Authorization", "Bearer sbx_at_bad"}} {
		if resp, _ := e.get("sleepy", "/", hdr...); resp.StatusCode < 400 {
			t.Errorf("request with %v: %d", hdr, resp.StatusCode)
		}
	}
	if n := w.count(); n != 0 {
		t.Fatalf("unauthorised requests woke the sandbox %d times", n)
	}
	// Its owner does, and is answered by the woken sandbox.
	if resp, body := e.get("sleepy", "/", "Authorization", "Bearer "+tokenA); resp.StatusCode != 200 {
		t.Fatalf("owner's request: %d %s", resp.StatusCode, body)
	}
	if n := w.count(); n != 1 {
		t.Errorf("Wake called %d times, want 1", n)
	}

	// A sandbox that cannot be woken: 503 with Retry-After, as a problem.
	e.res.set("sleepy", suspended)
	e.proxy.Invalidate("sleepy")
	w.mu.Lock()
	w.fail = true
	w.mu.Unlock()
	resp, body := e.get("sleepy", "/", "Authorization", "Bearer "+tokenA)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || problemCode(t, body) != "sandbox_not_ready" {
		t.Errorf("unwakeable sandbox: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
	}
}
