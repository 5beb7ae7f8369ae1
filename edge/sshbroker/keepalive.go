package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"sync"
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
// failure: it proves the peer is there.
//
// Probes run from timers rather than a goroutine per leg, so an idle
// connection holds no keepalive goroutine between probes. Every scheduled
// or running probe holds one count of cc.wg, so relay's Wait covers them.
func (cc *clientConn) keepalive(legs ...aliveLeg) {
	for _, l := range legs {
		if l.interval > 0 {
			p := &prober{cc: cc, leg: l}
			p.start()
		}
	}
}

// prober probes one leg. mu guards t and stopped.
type prober struct {
	cc      *clientConn
	leg     aliveLeg
	mu      sync.Mutex
	t       *time.Timer
	stopped bool
}

func (p *prober) start() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cc.wg.Add(1) // released by fire, or by stop if the timer never fires
	p.t = time.AfterFunc(p.leg.interval, p.fire)
	context.AfterFunc(p.cc.ctx, p.stop)
}

// stop cancels a pending probe when the connection ends.
func (p *prober) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopped = true
	if p.t.Stop() {
		p.cc.wg.Done()
	}
}

// fire sends one probe, then schedules the next unless the connection ended.
func (p *prober) fire() {
	defer p.cc.wg.Done()
	// The watchdog, not the send, enforces the limit: SendRequest to a
	// peer that went silent blocks until the socket is closed, which is
	// exactly what the watchdog's cancel does.
	limit := p.leg.interval * time.Duration(p.leg.countMax)
	dog := time.AfterFunc(limit, func() {
		cause := fmt.Errorf("%s: %w for %v", p.leg.name, errKeepalive, limit)
		if p.leg.name == "sandbox" {
			// The client is still there: tell its sessions why.
			cause = fmt.Errorf("%w (%w)", kick{msg: "sbx: the sandbox stopped responding; the connection was closed. Reconnect to continue."}, cause)
		}
		p.cc.cancel(cause)
	})
	_, _, err := p.leg.conn.SendRequest("keepalive@openssh.com", true, nil)
	dog.Stop()
	if err != nil {
		return // the connection is closing; its Wait reports why
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.cc.wg.Add(1) // safe: this probe still holds its own count
	p.t = time.AfterFunc(p.leg.interval, p.fire)
}
