package sshbroker

import (
	"errors"
	"fmt"
	"time"

	"golang.org/x/crypto/ssh"
)

// errKeepalive is the cause when a peer stopped answering keepalives.
var errKeepalive = errors.New("peer stopped answering keepalives")

// aliveLeg is one side of the connection the broker probes.
type aliveLeg struct {
	name     string // "client" or "sandbox", for the cause
	conn     ssh.Conn
	interval time.Duration
	countMax int
}

// keepalive sends keepalive@openssh.com to each leg every interval, as
// OpenSSH's ClientAliveInterval does, and ends the connection when a leg
// leaves countMax intervals unanswered. Any reply counts, success or
// failure: it proves the peer is there. It returns when the connection
// ends, because closing a leg fails its pending SendRequest.
func (cc *clientConn) keepalive(legs ...aliveLeg) {
	var active []aliveLeg
	for _, l := range legs {
		if l.interval > 0 {
			active = append(active, l)
		}
	}
	if len(active) == 0 {
		return
	}
	cc.wg.Add(len(active))
	for _, l := range active {
		go func() {
			defer cc.wg.Done()
			cc.probe(l)
		}()
	}
}

func (cc *clientConn) probe(l aliveLeg) {
	t := time.NewTicker(l.interval)
	defer t.Stop()
	for {
		select {
		case <-cc.ctx.Done():
			return
		case <-t.C:
		}
		// The watchdog, not the send, enforces the limit: SendRequest to a
		// peer that went silent blocks until the socket is closed, which
		// is exactly what the watchdog's cancel does.
		limit := l.interval * time.Duration(l.countMax)
		dog := time.AfterFunc(limit, func() {
			cause := fmt.Errorf("%s: %w for %v", l.name, errKeepalive, limit)
			if l.name == "sandbox" {
				// The client is still there: tell its sessions why.
				cause = fmt.Errorf("%w (%w)", kick{"sbx: the sandbox stopped responding; the connection was closed. Reconnect to continue."}, cause)
			}
			cc.cancel(cause)
		})
		_, _, err := l.conn.SendRequest("keepalive@openssh.com", true, nil)
		dog.Stop()
		if err != nil {
			return // the connection is closing; its Wait reports why
		}
	}
}
