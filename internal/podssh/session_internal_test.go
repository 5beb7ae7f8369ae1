package podssh

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"net"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
)

// pipeClient returns a client connected over loopback to a server
// that answers global requests, and the server's conn.
func pipeClient(t *testing.T) (*ssh.Client, ssh.Conn) {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{NoClientAuth: true}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srvc := make(chan ssh.Conn, 1)
	go func() {
		b, err := ln.Accept()
		if err != nil {
			srvc <- nil
			return
		}
		sc, chans, reqs, err := ssh.NewServerConn(b, cfg)
		if err != nil {
			srvc <- nil
			return
		}
		go ssh.DiscardRequests(reqs)
		go func() {
			for ch := range chans {
				ch.Reject(ssh.Prohibited, "no channels here")
			}
		}()
		srvc <- sc
	}()
	a, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	cc, chans, reqs, err := ssh.NewClientConn(a, ln.Addr().String(), &ssh.ClientConfig{User: "u", HostKeyCallback: ssh.InsecureIgnoreHostKey()})
	if err != nil {
		t.Fatal(err)
	}
	sc := <-srvc
	if sc == nil {
		t.Fatal("server handshake failed")
	}
	c := ssh.NewClient(cc, chans, reqs)
	t.Cleanup(func() { c.Close(); sc.Close() })
	return c, sc
}

// TestOpenAsideGivesUpOnDeadConnection stands in for x/crypto's lost
// channel: an open that never returns on a connection that has died must
// not hold its caller, while one on a live connection is waited for.
func TestOpenAsideGivesUpOnDeadConnection(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	t.Run("live connection, slow open: waited for", func(t *testing.T) {
		c, _ := pipeClient(t)
		open := func() (int, error) { time.Sleep(3 * sessionProbeInterval); return 7, nil }
		v, err := OpenAside(ctx, c, open, func(int) {})
		if err != nil || v != 7 {
			t.Fatalf("OpenAside = %d, %v; want 7 after the slow open", v, err)
		}
	})

	t.Run("dead connection, stuck open: given up", func(t *testing.T) {
		c, _ := pipeClient(t)
		stuck := make(chan struct{})
		discarded := make(chan int, 1)
		open := func() (int, error) { <-stuck; return 1, nil }
		c.Close()
		_, err := OpenAside(ctx, c, open, func(v int) { discarded <- v })
		if !errors.Is(err, errConnDead) {
			t.Fatalf("OpenAside on a dead connection = %v, want errConnDead", err)
		}
		close(stuck)
		select {
		case v := <-discarded:
			if v != 1 {
				t.Fatalf("discarded %d, want the late result 1", v)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a late open's result was never discarded")
		}
	})

	t.Run("caller's context ends: given up with its cause", func(t *testing.T) {
		c, _ := pipeClient(t)
		stuck := make(chan struct{})
		defer close(stuck)
		cctx, ccancel := context.WithCancelCause(ctx)
		why := errors.New("request ended")
		ccancel(why)
		_, err := OpenAside(cctx, c, func() (int, error) { <-stuck; return 0, nil }, func(int) {})
		if !errors.Is(err, why) {
			t.Fatalf("OpenAside = %v, want the context's cause", err)
		}
	})
}
