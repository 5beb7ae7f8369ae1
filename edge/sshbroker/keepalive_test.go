package sshbroker

import (
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/sshscenario"
)

// stallProxy relays TCP to target until freeze, after which it stops
// moving bytes in either direction but keeps both sockets open: a peer
// that vanished without a FIN, as behind a dead NAT or a lost node.
type stallProxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newStallProxy(t *testing.T, target string) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: target}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

func (p *stallProxy) Addr() string { return p.ln.Addr().String() }

func (p *stallProxy) freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

func (p *stallProxy) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.copy(u, c)
		go p.copy(c, u)
	}
}

// copy moves bytes until frozen; then it reads and drops, so the sender's
// writes still succeed (as into a dead path's socket buffers) and nothing
// is delivered.
func (p *stallProxy) copy(dst io.Writer, src io.Reader) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.isFrozen() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

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
	proxy := newStallProxy(t, e.addr)

	c, err := dialGo(e.addr, "127.0.0.1", "idle", idle.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vanishing, err := dialGo(proxy.Addr(), "127.0.0.1", "gone", gone.signer)
	if err != nil {
		t.Fatal(err)
	}
	defer vanishing.Close()
	waitOpen(t, e, "gone")
	proxy.freeze()

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
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	out, err := s.Output("echo still-here")
	if err != nil || string(out) != "still-here\n" {
		t.Fatalf("idle client after keepalives: %q %v", out, err)
	}
}

// A sandbox that stops answering ends the client's connection with a
// message, instead of a session that hangs forever.
func TestUpstreamKeepalive(t *testing.T) {
	e := newEnv(t, fastKeepalives)
	k := e.grant("alpha", nil)
	proxy := newStallProxy(t, e.up.Addr)
	e.auth.mu.Lock()
	c := e.auth.creds[k.fp]
	c.route.Addr = proxy.Addr()
	e.auth.creds[k.fp] = c
	e.auth.mu.Unlock()

	cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 60")
	bg := sshscenario.Background(t, cmd)
	waitOpen(t, e, "alpha")
	proxy.freeze()
	bg.Wait(t, 10*time.Second)
	if !strings.Contains(bg.Stderr.String(), "sandbox stopped responding") {
		t.Fatalf("stderr %q, want the reason", bg.Stderr.String())
	}
}
