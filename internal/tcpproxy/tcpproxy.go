// Package tcpproxy is a TCP proxy for fault tests: a test puts it between a
// client and a real server (Redis, Postgres, an SSH server) and cuts it to
// simulate the server going away, closing every connection, then restores
// it on the same address; or freezes it to simulate a peer that vanished
// without a FIN.
package tcpproxy

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Proxy forwards every connection to Target while started.
type Proxy struct {
	Addr, Target string

	mu     sync.Mutex // guards ln, conns and frozen
	ln     net.Listener
	conns  map[net.Conn]struct{}
	frozen bool
	wg     sync.WaitGroup // the accept loop and the copiers
}

// New starts a proxy to target on a loopback port; it is stopped when the
// test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	t.Cleanup(p.Stop)
	return p
}

// Start listens again on Addr after Stop.
func (p *Proxy) Start(t testing.TB) {
	t.Helper()
	ln, err := net.Listen("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	p.serve(ln)
}

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.Target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			if p.ln != ln { // stopped meanwhile
				p.mu.Unlock()
				c.Close()
				up.Close()
				return
			}
			p.conns[c], p.conns[up] = struct{}{}, struct{}{}
			p.mu.Unlock()
			p.wg.Go(func() { p.copy(up, c); up.Close() })
			p.wg.Go(func() { p.copy(c, up); c.Close() })
		}
	})
}

// copy moves bytes until src ends or dst fails. Once frozen it reads and
// drops, so the sender's writes still succeed (as into a dead path's
// socket buffers) and nothing is delivered.
func (p *Proxy) copy(dst io.Writer, src io.Reader) {
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

// Freeze stops moving bytes in either direction on every connection, open
// or to come, but keeps the sockets open: a peer that vanished without a
// FIN, as behind a dead NAT or a lost node. Stop still closes them.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.frozen = true
}

func (p *Proxy) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// Stop refuses new connections and closes every open one, as a server
// going down does, and waits for the proxy's goroutines.
func (p *Proxy) Stop() {
	p.mu.Lock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
	p.mu.Unlock()
	p.wg.Wait()
}
