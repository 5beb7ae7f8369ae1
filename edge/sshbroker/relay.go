package sshbroker

import (
	"errors"
	"io"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/connlog"
)

// Channel types a client may open; they are relayed to the sandbox as is.
// Everything else (x11, tun@openssh.com, ...) is refused.
var clientChannelTypes = map[string]bool{
	"session":                        true,
	"direct-tcpip":                   true,
	"direct-streamlocal@openssh.com": true,
}

// Global requests relayed from client to sandbox. Others get a failure
// reply from the broker, as an SSH server does for requests it does not know.
var clientGlobalRequests = map[string]bool{
	"tcpip-forward":                          true,
	"cancel-tcpip-forward":                   true,
	"streamlocal-forward@openssh.com":        true,
	"cancel-streamlocal-forward@openssh.com": true,
	"keepalive@openssh.com":                  true,
	"no-more-sessions@openssh.com":           true,
}

// markEvery throttles Activity.Mark per connection: the activity store
// coalesces anyway, and a mark per 32 KiB packet would be hot.
const markEvery = time.Second

// relay runs until either side of the connection ends, then closes both.
// It returns when every goroutine it started has returned.
//
// One loop serves both legs' new channels and global requests, so an
// idle connection holds this goroutine and x/crypto/ssh's own, nothing
// else: a goroutine's stack and descriptor cost more than the rest of an
// idle session's state on the broker. Nothing here waits on a peer except
// a write: channel opens run in goroutines of their own (openPair), and a
// relayed global request runs in one while the client's next waits.
func (cc *clientConn) relay(sconn *ssh.ServerConn) {
	up := cc.upConn()
	cfg := cc.b.cfg
	cc.keepalive(
		aliveLeg{"client", sconn, cfg.ClientAliveInterval, cfg.ClientAliveCountMax},
		aliveLeg{"sandbox", up, cfg.UpstreamAliveInterval, cfg.UpstreamAliveCountMax},
	)
	cliChans, cliReqs, upChans, upReqs := cc.serverChans, cc.serverReqs, cc.upChans, cc.upReqs
	// globalFree: the client's relayed global request has its reply. One
	// at a time keeps the replies in order (RFC 4254 4) and leaves the
	// backpressure on a flooding client where it was, in x/crypto/ssh's
	// queue.
	globalFree := make(chan struct{}, 1)
	cliReqsOpen := true
	for cliChans != nil || cliReqsOpen || upChans != nil || upReqs != nil {
		select {
		case nch, ok := <-cliChans:
			if !ok {
				cliChans = nil
				// Closed with the connection: its end is the client's.
				cc.cancel(peerClosed("client", sconn.Wait()))
				continue
			}
			cc.clientChannel(nch, up)
		case r, ok := <-cliReqs:
			if !ok {
				cliReqs, cliReqsOpen = nil, false
				continue
			}
			if cc.clientGlobal(r, up, globalFree) {
				cliReqs = nil // until globalFree
			}
		case <-globalFree:
			if cliReqsOpen {
				cliReqs = cc.serverReqs
			}
		case nch, ok := <-upChans:
			if !ok {
				upChans = nil
				cc.cancel(peerClosed("sandbox", up.Wait()))
				continue
			}
			cc.upstreamChannel(nch, sconn)
		case r, ok := <-upReqs:
			if !ok {
				upReqs = nil
				continue
			}
			// The broker is the sandbox's SSH client: it answers the
			// sandbox's keepalives itself and never passes on
			// hostkeys-00@openssh.com, which would teach the client the
			// sandbox's keys for our name.
			if r.WantReply {
				r.Reply(false, nil)
			}
		}
	}
	cc.wg.Wait()
}

type closedError struct {
	side string
	err  error
}

func (e closedError) Error() string {
	if e.err == nil || errors.Is(e.err, io.EOF) {
		return e.side + " closed the connection"
	}
	return e.side + " connection lost: " + e.err.Error()
}

func peerClosed(side string, err error) error { return closedError{side, err} }

func (cc *clientConn) upConn() ssh.Conn {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	return cc.up
}

// teardown closes both legs. For a kick it first writes the reason to
// every open session's stderr, waiting briefly: a client that is not
// reading must not hold the shutdown.
func (cc *clientConn) teardown(cause error) {
	cc.mu.Lock()
	sconn, up := cc.sconn, cc.up
	var sessions []ssh.Channel
	for ch := range cc.sessions {
		sessions = append(sessions, ch)
	}
	cc.mu.Unlock()
	var k kick
	if errors.As(cause, &k) && k.msg != "" && len(sessions) > 0 {
		done := make(chan struct{})
		go func() {
			defer close(done)
			for _, ch := range sessions {
				cc.eofMu.Lock() // see half: not beside a CloseWrite
				io.WriteString(ch.Stderr(), "\r\n"+k.msg+"\r\n")
				cc.eofMu.Unlock()
			}
		}()
		t := time.NewTimer(time.Second)
		select {
		case <-done:
		case <-t.C:
		}
		t.Stop()
		defer func() { <-done }() // closing below unblocks a stuck write
	}
	if sconn != nil {
		sconn.Close()
	}
	if up != nil {
		up.Close()
	}
	cc.nc.Close()
}

// clientGlobal answers or relays one global request from the client.
// busy says a relay is under way in a goroutine that signals free when
// the reply is sent; the caller holds the client's next request till then.
func (cc *clientConn) clientGlobal(r *ssh.Request, up ssh.Conn, free chan<- struct{}) (busy bool) {
	if !clientGlobalRequests[r.Type] {
		r.Reply(false, nil)
		return false
	}
	if r.Type == "tcpip-forward" || r.Type == "streamlocal-forward@openssh.com" {
		cc.rec.AddChannel(connlog.ChannelPortForward)
		// Arm before asking: the sandbox listens (and may accept a
		// connection) before its reply reaches us, and a forwarded
		// channel refused in that window resets the caller's connection.
		// Only listeners this client asked for can open such channels.
		cc.forwarding.Store(true)
	}
	cc.wg.Add(1)
	go func() {
		defer cc.wg.Done()
		ok, payload, err := up.SendRequest(r.Type, r.WantReply, r.Payload)
		if err != nil {
			ok, payload = false, nil
		}
		r.Reply(ok, payload)
		free <- struct{}{} // never blocks: one request at a time
	}()
	return true
}

// acquireChannel claims a slot of the per-connection channel cap.
func (cc *clientConn) acquireChannel() bool {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.channels >= cc.b.cfg.MaxChannelsPerConn {
		return false
	}
	cc.channels++
	return true
}

func (cc *clientConn) releaseChannel() {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	cc.channels--
}

func (cc *clientConn) clientChannel(nch ssh.NewChannel, up ssh.Conn) {
	if !clientChannelTypes[nch.ChannelType()] {
		cc.b.m.channelsRefused.WithLabelValues("type").Inc()
		nch.Reject(ssh.Prohibited, "channel type not supported by the sbx broker")
		return
	}
	cc.openPair(nch, up, true)
}

func (cc *clientConn) upstreamChannel(nch ssh.NewChannel, sconn *ssh.ServerConn) {
	var allowed bool
	switch nch.ChannelType() {
	case "forwarded-tcpip", "forwarded-streamlocal@openssh.com":
		allowed = cc.forwarding.Load()
	case "auth-agent@openssh.com":
		allowed = cc.agent.Load()
	}
	if !allowed {
		cc.b.m.channelsRefused.WithLabelValues("not_requested").Inc()
		nch.Reject(ssh.Prohibited, "not requested by the client")
		return
	}
	cc.openPair(nch, sconn, false)
}

// openPair opens the matching channel on dst and relays the two. The open
// round trip runs in its own goroutine so a slow upstream connect (ssh -L
// to a black hole) does not stall other channel opens; the channel cap
// bounds how many are in flight.
func (cc *clientConn) openPair(nch ssh.NewChannel, dst ssh.Conn, fromClient bool) {
	if !cc.acquireChannel() {
		cc.b.m.channelsRefused.WithLabelValues("limit").Inc()
		nch.Reject(ssh.ResourceShortage, "too many channels on this connection")
		return
	}
	cc.wg.Add(1)
	go func() {
		defer cc.wg.Done()
		defer cc.releaseChannel()
		typ := nch.ChannelType()
		dch, dreqs, err := dst.OpenChannel(typ, nch.ExtraData())
		if err != nil {
			var oe *ssh.OpenChannelError
			if errors.As(err, &oe) {
				nch.Reject(oe.Reason, oe.Message)
			} else {
				nch.Reject(ssh.ConnectionFailed, "open failed")
			}
			return
		}
		sch, sreqs, err := nch.Accept()
		if err != nil {
			dch.Close()
			return
		}
		if typ != "session" {
			cc.rec.AddChannel(connlog.ChannelPortForward)
		}
		g := cc.b.m.channels.WithLabelValues(typ)
		g.Inc()
		defer g.Dec()
		if fromClient {
			if typ == "session" {
				cc.mu.Lock()
				cc.sessions[sch] = struct{}{}
				cc.mu.Unlock()
				defer func() {
					cc.mu.Lock()
					delete(cc.sessions, sch)
					cc.mu.Unlock()
				}()
			}
			cc.pipe(sch, sreqs, dch, dreqs, typ == "session")
		} else {
			cc.pipe(dch, dreqs, sch, sreqs, false)
		}
	}()
}
