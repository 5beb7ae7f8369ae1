// Package redistest runs a private redis-server for fault tests: one a test
// may kill, restart empty, hang (SIGSTOP) and flush without touching the
// shared Redis other tests use.
package redistest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one private, unpersisted redis-server on a loopback port that
// stays the same across restarts.
type Server struct {
	t      *testing.T
	Addr   string
	cmd    *exec.Cmd
	waited chan error
}

// Start runs redis-server on a free port and waits until it answers. The
// server is killed when the test ends. A missing redis-server fails the
// test: .ci/run installs it.
func Start(t *testing.T) *Server {
	t.Helper()
	s := &Server{t: t, Addr: FreeAddr(t)}
	s.Restart()
	t.Cleanup(func() {
		s.Kill() // SIGKILL ends a hung (stopped) server too
	})
	return s
}

// URL is the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// FreeAddr picks a loopback address for a server to bind after this
// returns. The port is drawn below Linux's ephemeral range (32768-60999): a
// port from :0 lies inside it, and any outgoing connection on the machine
// (ssh, Postgres, HTTP clients of parallel tests) could take it as its
// source port before the server binds it ("address already in use"). A
// redis-server restarted on the same port can bind it again for the same
// reason. cmd/sbx's tests bind `sbx dev` on these addresses too.
func FreeAddr(t *testing.T) string {
	t.Helper()
	var last error
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			last = err
			continue
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	t.Fatalf("redistest: no free port below the ephemeral range: %v", last)
	return ""
}

// Restart starts the server (again) on its port, empty: nothing is saved
// across restarts.
func (s *Server) Restart() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("redistest: Restart while running; Kill first")
	}
	_, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("redis-server", "--bind", "127.0.0.1", "--port", port,
		"--save", "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start redis-server: %v", err)
	}
	s.cmd, s.waited = cmd, make(chan error, 1)
	go func() { s.waited <- cmd.Wait() }()
	c := redis.NewClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case werr := <-s.waited:
			s.cmd = nil
			s.t.Fatalf("redistest: redis-server on %s exited: %v", s.Addr, werr)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redistest: redis-server on %s not answering after 20s: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill ends the server with SIGKILL, as a crashed node, and waits for it.
func (s *Server) Kill() {
	s.t.Helper()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.waited
	s.cmd = nil
}

// Hang stops the server with SIGSTOP: connections stay open and nothing
// answers. Resume undoes it.
func (s *Server) Hang() { s.signal(syscall.SIGSTOP) }

// Resume continues a hung server.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	if s.cmd == nil {
		s.t.Fatalf("redistest: %v to a server that is not running", sig)
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: %v: %v", sig, err)
	}
}

// FlushAll runs FLUSHALL on this private server.
func (s *Server) FlushAll() {
	s.t.Helper()
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.FlushAll(ctx).Err(); err != nil {
		s.t.Fatalf("redistest: FLUSHALL on %s: %v", s.Addr, err)
	}
}
