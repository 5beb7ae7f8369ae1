// Package tcpproxy is a TCP relay for tests and measurements. A fault test
// puts it between a client and a real server (Redis, Postgres, an SSH
// server) and cuts it to simulate the server going away, closing every
// connection, then restores it on the same address; or freezes it to
// simulate a peer that vanished without a FIN. Unfrozen, it is a plain
// read/write loop each way, so a load test can use it as the floor for
// any relay in the middle.
package tcpproxy

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// Proxy forwards every connection to Target while started.
type Proxy struct {
	Addr, Target string

	dial func() (net.Conn, error) // opens each connection's Target side

	mu     sync.Mutex // guards ln and conns
	ln     net.Listener
	conns  map[net.Conn]struct{} // open connections, both sides
	frozen atomic.Bool
	wg     sync.WaitGroup // the accept loop and the copiers
}

// Listen starts a proxy to target on a loopback port. Stop ends it.
func Listen(target string) (*Proxy, error) {
	return ListenVia(target, func() (net.Conn, error) { return net.Dial("tcp", target) })
}

// ListenVia is Listen with each connection's far side opened by dial,
// such as a direct-tcpip channel on an SSH connection: the bare transport
// under a proxy that rides on it. target only names what dial reaches.
func ListenVia(target string, dial func() (net.Conn, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{Addr: ln.Addr().String(), Target: target, dial: dial, conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// New is Listen for a test: it fails the test if it cannot listen and
// stops the proxy when the test ends.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
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
			up, err := p.dial()
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
			p.wg.Go(func() { p.pipe(up, c) })
			p.wg.Go(func() { p.pipe(c, up) })
		}
	})
}

// pipe copies src to dst until src ends or dst fails, then closes dst,
// which ends the other direction's pipe in turn. Once frozen it reads and
// drops, so the sender's writes still succeed (as into a dead path's
// socket buffers) and nothing is delivered.
func (p *Proxy) pipe(dst, src net.Conn) {
	defer p.forget(dst)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.frozen.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) forget(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// Freeze stops moving bytes in either direction on every connection, open
// or to come, but keeps the sockets open: a peer that vanished without a
// FIN, as behind a dead NAT or a lost node. Stop still closes them.
func (p *Proxy) Freeze() { p.frozen.Store(true) }

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
	p.mu.Unlock()
	p.wg.Wait()
}
