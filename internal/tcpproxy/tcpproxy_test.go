package tcpproxy_test

import (
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/tcpproxy"
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

// TestFreeze checks a frozen proxy keeps the connection open and accepts
// writes but delivers nothing, and that Stop then closes it.
func TestFreeze(t *testing.T) {
	p := tcpproxy.New(t, echo(t))
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "before"); err != nil || got != "before" {
		t.Fatalf("before Freeze: got %q, %v; want the echo", got, err)
	}
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
	before, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if got, err := roundTrip(before, "first"); err != nil || got != "first" {
		t.Fatalf("before Stop: got %q, %v; want the echo", got, err)
	}
	p.Stop()
	_ = before.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := before.Read(make([]byte, 1)); err == nil {
		t.Fatalf("after Stop: read %d bytes, want the connection closed", n)
	}
	p.Start(t)
	c, err := net.Dial("tcp", p.Addr)
	if err != nil {
		t.Fatalf("dial after Start: %v", err)
	}
	defer c.Close()
	if got, err := roundTrip(c, "again"); err != nil || got != "again" {
		t.Fatalf("after Start: got %q, %v; want the echo", got, err)
	}
}
