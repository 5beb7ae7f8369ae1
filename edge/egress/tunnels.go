package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// tunnels holds every open relayed connection by sandbox, so a policy
// change or a sandbox's end can close the ones it no longer allows. It
// is small and local on purpose: the product's authority registry can
// take its place without changing the gateway's handlers.
type tunnels struct {
	mu   sync.Mutex // guards open
	open map[string]map[*tunnel]struct{}
}

// tunnel is one relayed connection: what it was allowed to reach and
// how to end it.
type tunnel struct {
	secret string // the credential it was opened with, to ask again
	target egresspolicy.Target
	addr   netip.Addr
	cancel context.CancelCauseFunc
}

// errSandboxEnded ends a sandbox's tunnels when it ends.
var errSandboxEnded = errors.New("the sandbox ended")

func (ts *tunnels) add(sandboxID string, t *tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.open == nil {
		ts.open = map[string]map[*tunnel]struct{}{}
	}
	m := ts.open[sandboxID]
	if m == nil {
		m = map[*tunnel]struct{}{}
		ts.open[sandboxID] = m
	}
	m[t] = struct{}{}
}

func (ts *tunnels) remove(sandboxID string, t *tunnel) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	m := ts.open[sandboxID]
	delete(m, t)
	if len(m) == 0 {
		delete(ts.open, sandboxID)
	}
}

// recheck cancels each of the sandbox's tunnels p no longer allows and
// returns how many it cancelled. The refused ranges do not change while
// the gateway runs, so only the policy is asked again.
func (ts *tunnels) recheck(sandboxID string, p *egresspolicy.Policy) int {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	n := 0
	for t := range ts.open[sandboxID] {
		if p.Allows(t.target, t.addr) {
			continue
		}
		reason := p.Refusal(t.target)
		if reason == "" {
			reason = t.target.String() + " is no longer allowed"
		}
		t.cancel(fmt.Errorf("closed by a policy change: %s", reason))
		n++
	}
	return n
}

// end cancels every tunnel of a sandbox, or of every sandbox when
// sandboxID is empty, with cause.
func (ts *tunnels) end(sandboxID string, cause error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for id, m := range ts.open {
		if sandboxID != "" && id != sandboxID {
			continue
		}
		for t := range m {
			t.cancel(cause)
		}
	}
}

// credential returns the secret one of the sandbox's open tunnels was
// opened with, or "" when it has none open.
func (ts *tunnels) credential(sandboxID string) string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for t := range ts.open[sandboxID] {
		return t.secret
	}
	return ""
}
