package egress

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// tunnels holds every open relayed connection in the product's authority
// registry, keyed by the sandbox whose egress credential opened it, so a
// policy change or a sandbox's end can close the ones it no longer
// allows, and a change racing a new connection is not lost (the
// registry's epoch).
type tunnels struct {
	reg *authority.Registry[*tunnel]
}

func newTunnels() tunnels { return tunnels{reg: authority.New[*tunnel](nil)} }

// tunnel is one relayed connection: what it was allowed to reach and
// the credential it was opened with, to ask again.
type tunnel struct {
	secret string
	target egresspolicy.Target
	addr   netip.Addr
}

// errSandboxEnded ends a sandbox's tunnels when it ends.
var errSandboxEnded = &authority.Ended{Reason: authority.ErrSandboxEnded, Detail: "its proxy credential is no longer valid"}

func egressKey(sandboxID string) authority.Key {
	return authority.Key{Kind: authority.Egress, ID: sandboxID}
}

// epoch is read before a request's policy is asked for, and handed to add.
func (ts tunnels) epoch() uint64 { return ts.reg.Epoch() }

// add registers a tunnel whose policy was read at epoch; raced reports a
// change of any sandbox since, after which the tunnel must be checked
// again.
func (ts tunnels) add(epoch uint64, sandboxID string, t *tunnel, cancel context.CancelCauseFunc) (c *authority.Conn[*tunnel], raced bool) {
	return ts.reg.Register(epoch, authority.Registration[*tunnel]{
		Keys: []authority.Key{egressKey(sandboxID)}, Value: t, End: cancel,
	})
}

func (ts tunnels) remove(c *authority.Conn[*tunnel]) { ts.reg.Remove(c) }

// changed records that a sandbox changed, so a tunnel registering with
// an older epoch knows to ask again.
func (ts tunnels) changed(sandboxID string) { ts.reg.Invalidate(egressKey(sandboxID)) }

// recheck ends each of the sandbox's tunnels p no longer allows and
// returns how many it ended. The refused ranges do not change while the
// gateway runs, so only the policy is asked again.
func (ts tunnels) recheck(sandboxID string, p *egresspolicy.Policy) int {
	n := 0
	for _, c := range ts.reg.Match(egressKey(sandboxID)) {
		t := c.Value
		if p.Allows(t.target, t.addr) {
			continue
		}
		reason := p.Refusal(t.target)
		if reason == "" {
			reason = t.target.String() + " is no longer allowed"
		}
		if c.End(&authority.Ended{Reason: authority.ErrRevoked, Detail: "closed by a policy change: " + reason}) {
			n++
		}
	}
	return n
}

// end ends every tunnel of a sandbox, or of every sandbox when sandboxID
// is empty, with cause.
func (ts tunnels) end(sandboxID string, cause error) {
	conns := ts.reg.All()
	if sandboxID != "" {
		conns = ts.reg.Match(egressKey(sandboxID))
	}
	for _, c := range conns {
		c.End(cause)
	}
}

// credential returns the secret one of the sandbox's open tunnels was
// opened with, or "" when it has none open.
func (ts tunnels) credential(sandboxID string) string {
	for _, c := range ts.reg.Match(egressKey(sandboxID)) {
		return c.Value.secret
	}
	return ""
}

// endedReason is what a decision's record says of a tunnel cut short.
func endedReason(cause error) string {
	var e *authority.Ended
	if errors.As(cause, &e) && e.Detail != "" {
		return e.Detail
	}
	return fmt.Sprint(cause)
}
