package egress

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

type countingSandboxes struct {
	fakeSandboxes
	calls atomic.Int32
}

func (c *countingSandboxes) EgressPolicy(ctx context.Context, id, secret string) (*egresspolicy.Policy, error) {
	c.calls.Add(1)
	return c.fakeSandboxes.EgressPolicy(ctx, id, secret)
}

func TestCache(t *testing.T) {
	t.Parallel()
	src := &countingSandboxes{fakeSandboxes: fakeSandboxes{
		secrets: map[string]string{sandboxID: secret}, policies: map[string]*egresspolicy.Policy{sandboxID: allow("a.test")},
	}}
	now := time.Unix(1_700_000_000, 0)
	c := NewCache(src, 2*time.Second, func() time.Time { return now })
	ctx := context.Background()
	ask := func(s string) (*egresspolicy.Policy, error) { return c.EgressPolicy(ctx, sandboxID, s) }

	if _, err := ask(secret); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(secret); err != nil || src.calls.Load() != 1 {
		t.Fatalf("second ask: %v, %d calls; want one call, cached", err, src.calls.Load())
	}
	if _, err := ask("sbx_px_wrong"); !errors.Is(err, ErrUnauthorized) || src.calls.Load() != 2 {
		t.Fatalf("a different secret: %v after %d calls; want the source asked and a refusal", err, src.calls.Load())
	}
	src.setPolicy(sandboxID, allow("b.test"))
	now = now.Add(2 * time.Second)
	p, err := ask(secret)
	if err != nil || p.Entries()[0] != "b.test" {
		t.Fatalf("after the TTL: %v, %v; want the new policy", p, err)
	}
	src.setPolicy(sandboxID, allow("c.test"))
	c.Forget(sandboxID)
	if p, _ := ask(secret); p.Entries()[0] != "c.test" {
		t.Fatalf("after Forget: %v, want the new policy", p)
	}
}

// TestRecheck: control's word that a sandbox changed reaches its open
// tunnels through the cache: a narrower policy closes the ones it
// refuses, a dead credential closes all.
func TestRecheck(t *testing.T) {
	t.Parallel()
	r := newRig(t, allow("keep.test", "drop.test"), loopback)
	r.gw.cfg.Sandboxes = NewCache(r.sandboxes, time.Hour, nil)
	port := echoServer(t)
	r.resolver.set("keep.test", []string{"127.0.0.1"})
	r.resolver.set("drop.test", []string{"127.0.0.1"})
	keepC, keepR := openTunnel(t, r, "keep.test", port)
	dropC, dropR := openTunnel(t, r, "drop.test", port)
	_ = keepC

	r.sandboxes.setPolicy(sandboxID, allow("keep.test"))
	r.gw.Recheck(context.Background(), sandboxID)
	wantClosed(t, dropC, dropR, "the tunnel the new policy refuses")
	echo(t, keepC, keepR, "still open")

	r.sandboxes.mu.Lock()
	delete(r.sandboxes.secrets, sandboxID)
	r.sandboxes.mu.Unlock()
	r.gw.Recheck(context.Background(), sandboxID)
	wantClosed(t, keepC, keepR, "a tunnel of a sandbox whose credential died")
}
