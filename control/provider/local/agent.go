package local

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/netlimit"
)

// agentChannel is the channel OpenSSH's server opens back to the client
// for each use of a forwarded agent (PROTOCOL.agent).
const agentChannel = "auth-agent@openssh.com"

// agentSocket is SSH_AUTH_SOCK for one embedded session whose client
// asked for agent forwarding (ssh -A), as sshd provides it: every
// connection to the socket is relayed over a new agent channel to the
// client, which answers from its own agent. The session's handler owns
// it and closes it when the session ends.
type agentSocket struct {
	dir  string // private to the OS user; holds only the socket
	path string
	ln   net.Listener
	conn gossh.Conn

	mu     sync.Mutex // guards open, closed
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup // the accept loop and the relays
}

// listenAgent starts an agent socket relaying to the client of conn. The
// socket lives in a new directory under the system's temporary one, not
// the sandbox's, whose path may be too long for a unix socket.
func listenAgent(conn gossh.Conn) (*agentSocket, error) {
	dir, err := os.MkdirTemp("", "sbx-agent-")
	if err != nil {
		return nil, fmt.Errorf("agent socket dir: %w", err)
	}
	a := &agentSocket{dir: dir, path: filepath.Join(dir, "agent.sock"), conn: conn, open: map[net.Conn]struct{}{}}
	a.ln, err = net.Listen("unix", a.path)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("agent socket: %w", err)
	}
	a.wg.Go(a.accept)
	return a, nil
}

func (a *agentSocket) accept() {
	var backoff netlimit.Backoff
	for {
		c, err := a.ln.Accept()
		if err != nil {
			if netlimit.Temporary(err) {
				// Out of descriptors: the agent comes back with them.
				time.Sleep(backoff.Next())
				continue
			}
			return // closed
		}
		backoff.Reset()
		if !a.track(c, true) {
			c.Close()
			return
		}
		a.wg.Go(func() {
			defer a.track(c, false)
			defer c.Close()
			a.relay(c)
		})
	}
}

// relay carries one agent conversation between c and a new agent channel
// to the client; a client that refuses the channel (no agent after all)
// looks, to the program in the session, like an agent that hung up.
func (a *agentSocket) relay(c net.Conn) {
	ch, reqs, err := a.conn.OpenChannel(agentChannel, nil)
	if err != nil {
		return
	}
	defer ch.Close()
	go gossh.DiscardRequests(reqs) // ends when ch closes
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(c, ch)
		_ = c.(*net.UnixConn).CloseWrite()
	}()
	_, _ = io.Copy(ch, c)
	_ = ch.CloseWrite()
	<-done
}

// track adds or removes c from the open conversations; adding fails once
// the socket is closed.
func (a *agentSocket) track(c net.Conn, add bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !add {
		delete(a.open, c)
		return true
	}
	if a.closed {
		return false
	}
	a.open[c] = struct{}{}
	return true
}

// close stops accepting, ends the conversations still open, waits for
// their relays and removes the socket's directory.
func (a *agentSocket) close() error {
	a.mu.Lock()
	a.closed = true
	for c := range a.open {
		c.Close()
	}
	a.mu.Unlock()
	err := a.ln.Close()
	a.wg.Wait()
	return errors.Join(err, os.RemoveAll(a.dir))
}
