package sshbroker

import (
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
)

func openCount(e *env, sandbox string) int {
	e.act.mu.Lock()
	defer e.act.mu.Unlock()
	return e.act.open[sandbox]
}

func fastKeepalives(c *Config) {
	c.ClientAliveInterval, c.ClientAliveCountMax = 200*time.Millisecond, 3
	c.UpstreamAliveInterval, c.UpstreamAliveCountMax = 200*time.Millisecond, 3
}

// A live client that is merely idle answers keepalives and stays; one that
// vanished is dropped after CountMax intervals, freeing its slot.
func TestClientKeepalive(t *testing.T) {
	e := newEnv(t, fastKeepalives)
	idle := e.grant("idle", nil)
	gone := e.grant("gone", nil)
	proxy := tcpproxy.New(t, e.addr)

	c, err := dialGo(e.addr, "127.0.0.1", "idle", idle.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vanishing, err := dialGo(proxy.Addr, "127.0.0.1", "gone", gone.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer vanishing.Close()
	waitOpen(t, e, "gone")
	proxy.Freeze()

	deadline := time.Now().Add(10 * time.Second)
	for openCount(e, "gone") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the broker still holds a connection whose client stopped answering")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The idle client saw several keepalive intervals pass and is still
	// connected and usable.
	if openCount(e, "idle") != 1 {
		t.Fatalf("idle client was dropped")
	}
	mustEcho(t, c, "still-here", "idle client after keepalives")
}

// A sandbox that stops answering ends the client's connection with a
// message, instead of a session that hangs forever.
func TestUpstreamKeepalive(t *testing.T) {
	e := newEnv(t, fastKeepalives)
	k := e.grant("alpha", nil)
	proxy := tcpproxy.New(t, e.up.Addr)
	e.auth.update(k.fp, func(c *cred) { c.route.Addr = proxy.Addr })

	cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 60")
	bg := sshscenario.Background(t, cmd)
	waitOpen(t, e, "alpha")
	proxy.Freeze()
	bg.Wait(t, 10*time.Second)
	if !strings.Contains(bg.Stderr.String(), "sandbox stopped responding") {
		t.Fatalf("stderr %q, want the reason", bg.Stderr.String())
	}
}
