package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// errWakeFailed marks a connection refused because its sandbox did not
// wake; the key holder is told.
var errWakeFailed = errors.New("sandbox could not be woken")

// Waker brings a suspended sandbox back. Wake blocks until the sandbox is
// ready, ctx ends or the sandbox cannot be woken; it is idempotent under
// any number of concurrent callers.
type Waker interface {
	Wake(ctx context.Context, sandboxID string) error
}

// wakeable reports whether err means "good credential, sandbox not
// running" and this broker can wake sandboxes.
func (cc *clientConn) wakeable(err error) bool {
	return cc.b.cfg.Waker != nil && errors.Is(err, ErrNotReady)
}

// wakeTarget is the sandbox a not-ready refusal is about: the ID control
// resolved the username to (the username may be the sandbox's name), or
// the username itself from a control that predates names.
func wakeTarget(user string, notReady error) string {
	if nr := (*edgeapi.SSHNotReadyError)(nil); errors.As(notReady, &nr) && nr.SandboxID != "" {
		return nr.SandboxID
	}
	return user
}

// wake runs once the client proved it holds a key for a sandbox that is
// not running (suspended while idle, or still starting); notReady is
// control's refusal, which names the sandbox. It tells the
// client what is happening with a userauth banner, which stock OpenSSH
// prints on stderr while it waits (unless -q), extends the handshake
// deadline by WakeTimeout, waits for the sandbox and authorizes again for
// its new endpoint.
func (cc *clientConn) wake(user, fp string, notReady error) authResult {
	b := cc.b
	sandboxID := wakeTarget(user, notReady)
	if cc.preAuth != nil {
		msg := fmt.Sprintf("sbx: waking sandbox %s (suspended); this takes a few seconds...\r\n", user)
		if err := cc.preAuth.SendAuthBanner(msg); err != nil {
			return authResult{err: fmt.Errorf("send wake banner: %w", err)}
		}
	}
	cc.deadline = time.Now().Add(b.cfg.WakeTimeout + b.cfg.HandshakeTimeout)
	if err := cc.nc.SetDeadline(cc.deadline); err != nil {
		return authResult{err: fmt.Errorf("extend handshake deadline for wake: %w", err)}
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(cc.ctx, b.cfg.WakeTimeout)
	err := b.cfg.Waker.Wake(ctx, sandboxID)
	cancel()
	b.m.wakes.Observe(time.Since(start).Seconds())
	if err != nil {
		cc.log.Warn("wake failed", "sandbox_id", sandboxID, "err", err)
		return authResult{err: fmt.Errorf("%w: %w: %w", ErrNotReady, errWakeFailed, err)}
	}
	cc.log.Info("sandbox woken for connection", "sandbox_id", sandboxID, "waited", time.Since(start).Round(time.Millisecond))
	res := cc.authorize(user, fp)
	cc.results[fp] = res
	return res
}

// refreshRoute runs after a failed upstream dial. A cached route can
// outlive its pod (the sandbox was suspended since it was cached), so the
// cache is dropped for the sandbox and the Authorizer asked again; a
// sandbox that is now not running is woken. The result is a route worth one
// more dial when its err is nil; otherwise err says why the sandbox is not
// reachable (ended, expired, could not be woken).
func (cc *clientConn) refreshRoute(user, fp string) authResult {
	if cc.b.cache != nil {
		cc.b.cache.Invalidate(user)
	}
	res := cc.authorize(user, fp)
	if cc.wakeable(res.err) {
		res = cc.wake(user, fp, res.err)
	}
	cc.results[fp] = res
	return res
}
