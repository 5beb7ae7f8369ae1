// Package podtcptest holds what the tests of a forwarder's hosts (the
// local provider, the sandbox init, the Kubernetes provider) share: an app
// in the sandbox to reach, and an exchange with it through the forwarder.
package podtcptest

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/podtcp"
)

// EchoApp stands in for a dev server in the sandbox: it echoes every
// connection on 127.0.0.1 until the test ends, and returns its port.
func EchoApp(tb testing.TB) int {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		var conns sync.WaitGroup
		defer conns.Wait()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			})
		}
	})
	tb.Cleanup(func() {
		ln.Close()
		wg.Wait()
	})
	return ln.Addr().(*net.TCPAddr).Port
}

// Echo sends msg through c to an EchoApp and reads it back, within 10 s;
// an error says what came back instead.
func Echo(c net.Conn, msg string) error {
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read the echo: %w (got %q)", err, got)
	}
	if string(got) != msg {
		return fmt.Errorf("echo %q, want %q", got, msg)
	}
	return nil
}

// Serve runs a forwarder with fixed keys on 127.0.0.1 until the test
// ends, and returns its address.
func Serve(tb testing.TB, keys podtcp.Keys) string {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	f := &podtcp.Forwarder{Keys: func() (podtcp.Keys, error) { return keys, nil }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Serve(ctx, ln) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Errorf("forwarder: %v", err)
		}
	})
	return ln.Addr().String()
}
