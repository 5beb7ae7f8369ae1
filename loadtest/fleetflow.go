package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// flow is one client keeping traffic going: a round trip every
// flowInterval over its connection; on a failure it reconnects, first
// through the edge it was on, then through the others, as a client
// retrying a name that resolves to every edge does.
type flow struct {
	name    string
	kind    string // ssh-pty, ssh-exec, preview-ws (through an edge); api-pty, api-exec (through the controls)
	sandbox string
	f       *fleet
	key     gossh.Signer // ssh kinds
	host    string       // preview-ws: the preview host name

	mu       sync.Mutex
	edge     int // index of the edge it is on now (-1: control-side)
	homeEdge int
	ok, fail int
	down     time.Time // when the current outage began; zero while up
	outages  []outage
	revoked  time.Time // set once its authority is revoked: it stops reconnecting
	lastOK   time.Time
	ended    bool // its connection failed after the revocation
	endedAt  time.Time
	done     chan struct{}
}

// outage is one span from a failed round trip to the next good one.
type outage struct {
	start, end time.Time
	to         int // the edge it came back through
}

const flowInterval = 50 * time.Millisecond

// connect opens the flow's connection through edge (ignored by the
// control-side kinds). A failed dial is a nil conn, never a typed nil.
func (fl *flow) connect(ctx context.Context, edge int) (conn, error) {
	f := fl.f
	var (
		c   conn
		err error
	)
	switch fl.kind {
	case "ssh-pty", "ssh-exec":
		var sc *sshConn
		if sc, err = dialSSH(ctx, f.edges[edge].ssh, fl.sandbox, fl.key, fl.kind == "ssh-pty"); err == nil {
			c = sc
		}
	case "preview-ws":
		var wc *wsConn
		if wc, err = f.dialWS(ctx, f.edges[edge].preview, fl.host); err == nil {
			c = wc
		}
	case "api-pty":
		var pc *ptyStream
		if pc, err = f.dialPTY(ctx, fl.sandbox); err == nil {
			c = pc
		}
	default:
		c = &apiExecConn{f: f, id: fl.sandbox}
	}
	return c, err
}

// run keeps the flow going until ctx ends.
func (fl *flow) run(ctx context.Context) {
	defer close(fl.done)
	var c conn
	defer func() {
		if c != nil {
			c.close()
		}
	}()
	seq := 0
	for ctx.Err() == nil {
		if c == nil {
			nc, err := fl.dial(ctx)
			if err != nil {
				sleepCtx(ctx, 100*time.Millisecond)
				continue
			}
			c = nc
		}
		seq++
		err := c.roundTrip(ctx, fmt.Sprintf("%s-%d", fl.name, seq))
		if ctx.Err() != nil {
			return
		}
		fl.record(err)
		if err != nil {
			c.close()
			c = nil
		}
		sleepCtx(ctx, flowInterval)
	}
}

// dial connects through the current edge, then the others in turn. A
// revoked flow does not reconnect.
func (fl *flow) dial(ctx context.Context) (conn, error) {
	fl.mu.Lock()
	cur, revoked := fl.edge, !fl.revoked.IsZero()
	fl.mu.Unlock()
	if revoked {
		return nil, fmt.Errorf("revoked")
	}
	if cur < 0 {
		return fl.connect(ctx, 0)
	}
	var err error
	for i := range fl.f.edges {
		e := (cur + i) % len(fl.f.edges)
		var c conn
		if c, err = fl.connect(ctx, e); err == nil {
			fl.mu.Lock()
			fl.edge = e
			fl.mu.Unlock()
			return c, nil
		}
	}
	return nil, err
}

func (fl *flow) record(err error) {
	now := time.Now()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if err != nil {
		fl.fail++
		if fl.down.IsZero() {
			fl.down = now
		}
		if !fl.revoked.IsZero() && !fl.ended {
			fl.ended, fl.endedAt = true, now
		}
		return
	}
	fl.ok++
	fl.lastOK = now
	if !fl.down.IsZero() {
		fl.outages = append(fl.outages, outage{start: fl.down, end: now, to: fl.edge})
		fl.down = time.Time{}
	}
}

// revoke marks the flow's authority as revoked now: from here on it must
// fail, and it does not reconnect.
func (fl *flow) revoke(at time.Time) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.revoked = at
	if !fl.down.IsZero() && !fl.ended {
		// Its connection already failed (closed while the revoking
		// call was in flight): it will not reconnect, so it is over.
		fl.ended, fl.endedAt = true, at
	}
}

// snapshot is the flow's counters, read under its lock.
type flowStats struct {
	ok, fail       int
	outages        []outage
	down           time.Time
	edge           int
	revoked        time.Time
	lastOK         time.Time
	ended          bool
	endedAt        time.Time
	name, kind, sb string
}

func (fl *flow) stats() flowStats {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return flowStats{ok: fl.ok, fail: fl.fail, outages: append([]outage(nil), fl.outages...), down: fl.down, edge: fl.edge,
		revoked: fl.revoked, lastOK: fl.lastOK, ended: fl.ended, endedAt: fl.endedAt, name: fl.name, kind: fl.kind, sb: fl.sandbox}
}

// resetCounters starts a new scenario's counting.
func (fl *flow) resetCounters() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.ok, fl.fail, fl.outages = 0, 0, nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// flowSet runs flows and stops them together.
type flowSet struct {
	flows  []*flow
	cancel context.CancelFunc
}

func (s *flowSet) start(ctx context.Context, fl *flow) {
	fl.done = make(chan struct{})
	s.flows = append(s.flows, fl)
	go fl.run(ctx) // stopped by s.stop through ctx
}

func (s *flowSet) stop() {
	s.cancel()
	for _, fl := range s.flows {
		<-fl.done
	}
}

// waitFlowing waits until every flow that is not revoked has had a good
// round trip since t.
func (s *flowSet) waitFlowing(ctx context.Context, t time.Time, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var stuck []string
		for _, fl := range s.flows {
			st := fl.stats()
			if st.revoked.IsZero() && st.lastOK.Before(t) {
				stuck = append(stuck, st.name)
			}
		}
		if len(stuck) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("flows without a round trip for %v: %v", limit, stuck)
		}
		sleepCtx(ctx, 20*time.Millisecond)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
