package tcpproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
)

// echo serves an echo server on loopback until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().String()
}

func roundTrip(c net.Conn, msg string) (string, error) {
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", err
	}
	buf := make([]byte, len(msg))
	_ = c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	_, err := io.ReadFull(c, buf)
	return string(buf), err
}

// dial connects through p and wants msg echoed.
func dial(t *testing.T, p *tcpproxy.Proxy, msg string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatalf("dial %s: %v", p.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	if got, err := roundTrip(c, msg); err != nil || got != msg {
		t.Fatalf("through the proxy: got %q, %v; want the echo of %q", got, err, msg)
	}
	return c
}

// TestFreeze checks a frozen proxy keeps the connection open and accepts
// writes but delivers nothing, and that Stop then closes it.
func TestFreeze(t *testing.T) {
	p := tcpproxy.New(t, echo(t))
	c := dial(t, p, "before")
	p.Freeze()
	if got, err := roundTrip(c, "after"); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("after Freeze: got %q, %v; want a read timeout", got, err)
	}
	p.Stop()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatalf("after Stop: read %d bytes, want the connection closed", n)
	}
}

// TestStopStart checks Stop closes open connections and Start serves
// again on the same address.
func TestStopStart(t *testing.T) {
	p := tcpproxy.New(t, echo(t))
	before := dial(t, p, "first")
	p.Stop()
	_ = before.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := before.Read(make([]byte, 1)); err == nil {
		t.Fatalf("after Stop: read %d bytes, want the connection closed", n)
	}
	p.Start(t)
	dial(t, p, "again")
}

// TestListenVia checks each connection's far side comes from dial, once
// per connection.
func TestListenVia(t *testing.T) {
	target := echo(t)
	var dials atomic.Int32
	p, err := tcpproxy.ListenVia("via", func() (net.Conn, error) {
		dials.Add(1)
		return net.Dial("tcp", target)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Stop)
	dial(t, p, "one")
	dial(t, p, "two")
	if n := dials.Load(); n != 2 {
		t.Fatalf("dial called %d times for two connections, want 2", n)
	}
}
