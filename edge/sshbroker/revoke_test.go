package sshbroker

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestRevokeSandbox: control's sandbox invalidation ends the open
// connections of a sandbox that ended, telling their sessions why, and
// drops its cached route so the next connection is refused with the
// reason even while the pod still answers; a sandbox that did not end
// (suspending, restored) keeps its connections.
func TestRevokeSandbox(t *testing.T) {
	for _, tc := range []struct {
		name    string
		refusal error // control's answer after the change
		ended   bool
	}{
		{"ended", ErrSandboxEnded, true},
		{"not ready", ErrNotReady, false},
		{"running", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, nil)
			k := e.grant("alpha", nil)
			cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 3; echo still-open")
			var out sshscenario.SyncBuffer
			cmd.Stdout = &out
			bg := sshscenario.Background(t, cmd)
			waitOpen(t, e, "alpha")
			e.auth.update(k.fp, func(c *cred) { c.err = tc.refusal })

			start := time.Now()
			e.broker.Revoke(context.Background(), edgeapi.Invalidation{Kind: edgeapi.InvalidateSandbox, SandboxID: "alpha"})
			bg.Wait(t, 20*time.Second)
			msg := "sandbox alpha has ended"
			if tc.ended {
				if time.Since(start) > 2*time.Second || !strings.Contains(bg.Stderr.String(), msg) || out.String() != "" {
					t.Fatalf("after %v stdout %q stderr %q, want the session ended at once with the reason", time.Since(start), out.String(), bg.Stderr.String())
				}
				r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "echo in"), nil)
				if r.code != 255 || !strings.Contains(r.stderr, msg) {
					t.Fatalf("new connection: code %d stderr %q, want 255 and the reason (not the cached route)", r.code, r.stderr)
				}
				return
			}
			if out.String() != "still-open\n" || strings.Contains(bg.Stderr.String(), "sbx:") {
				t.Fatalf("stdout %q stderr %q, want the session left alone", out.String(), bg.Stderr.String())
			}
		})
	}
}

// TestRevokeToken: control's token invalidation ends the open connections
// whose key control no longer knows (minted by the revoked token), telling
// their sessions why, and leaves the other keys' connections alone, a
// control fault included. The keys are checked side by side: control
// answers for the revoked key only once the check of a key it hangs on
// has begun, which checks one after another never reach.
func TestRevokeToken(t *testing.T) {
	e := newEnv(t, nil)
	revoked := e.grant("alpha", nil)
	kept := e.grant("alpha", nil)
	unsure := e.grant("alpha", nil)
	type session struct {
		out *sshscenario.SyncBuffer
		bg  *sshscenario.Proc
	}
	open := func(k key) session {
		cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 3; echo still-open")
		var out sshscenario.SyncBuffer
		cmd.Stdout = &out
		bg := sshscenario.Background(t, cmd)
		return session{&out, bg}
	}
	sRevoked, sKept, sUnsure := open(revoked), open(kept), open(unsure)
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		e.act.mu.Lock()
		n := e.act.open["alpha"]
		e.act.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections open to alpha, want 3", n)
		}
	}
	waitOpen(t, e, "alpha") // and the sessions' requests landed
	hanging := make(chan struct{})
	e.auth.update(unsure.fp, func(c *cred) {
		c.answer = func(ctx context.Context) error {
			close(hanging)
			<-ctx.Done() // control unreachable: the call times out
			return ctx.Err()
		}
	})
	e.auth.update(revoked.fp, func(c *cred) {
		c.answer = func(ctx context.Context) error {
			select {
			case <-hanging:
				return ErrUnknownKey
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})

	start := time.Now()
	revoking := make(chan struct{})
	go func() {
		defer close(revoking)
		// It returns once the hanging check times out.
		e.broker.Revoke(context.Background(), edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct"})
	}()
	defer func() { <-revoking }()
	sRevoked.bg.Wait(t, 20*time.Second)
	if time.Since(start) > 2*time.Second || !strings.Contains(sRevoked.bg.Stderr.String(), msgKeyRevoked) || sRevoked.out.String() != "" {
		t.Fatalf("revoked key after %v: stdout %q stderr %q, want the session ended at once with the reason",
			time.Since(start), sRevoked.out.String(), sRevoked.bg.Stderr.String())
	}
	for name, s := range map[string]session{"kept": sKept, "control fault": sUnsure} {
		s.bg.Wait(t, 20*time.Second)
		if s.out.String() != "still-open\n" || strings.Contains(s.bg.Stderr.String(), "sbx:") {
			t.Errorf("%s key: stdout %q stderr %q, want the session left alone", name, s.out.String(), s.bg.Stderr.String())
		}
	}
}

// TestRevokeRacingHandshake: a token revoked while a connection's key is
// being checked still ends that connection. The invalidation's own check
// runs before the connection is registered and finds nothing to end, so
// the connection's registration notices the invalidation came since its
// key was checked (the registry's epoch) and checks the key again. Before
// the registry, the connection stayed open.
func TestRevokeRacingHandshake(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	var calls atomic.Int32
	e.auth.update(k.fp, func(c *cred) {
		c.answer = func(ctx context.Context) error {
			if calls.Add(1) > 1 {
				return ErrUnknownKey // the token that minted it is gone
			}
			// Revoked while this (the handshake's) check is under way.
			e.broker.Revoke(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct"})
			return nil
		}
	})
	start := time.Now()
	r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, "sleep 3; echo still-open"), nil)
	// Ended before any session was open to be told why.
	if r.stdout != "" || r.code != 255 || time.Since(start) > 3*time.Second {
		t.Fatalf("after %v: code %d stdout %q stderr %q, want the connection ended at once",
			time.Since(start), r.code, r.stdout, r.stderr)
	}
}

// TestRevokeAllAfterMissedInvalidations: the invalidation a subscriber
// makes when it re-subscribes after a Redis outage (InvalidateAll, no
// sandbox named) ends the connections of a sandbox that ended meanwhile,
// whose own invalidation was lost, and drops the cached route so a new
// connection hears the reason; another sandbox's connection stays.
func TestRevokeAllAfterMissedInvalidations(t *testing.T) {
	e := newEnv(t, nil)
	ended, alive := e.grant("alpha", nil), e.grant("beta", nil)
	open := func(k key, sb string) (*sshscenario.SyncBuffer, *sshscenario.Proc) {
		cmd := e.ssh(testCtx(t, sshCeiling), k, sb, nil, "sleep 3; echo still-open")
		var out sshscenario.SyncBuffer
		cmd.Stdout = &out
		bg := sshscenario.Background(t, cmd)
		waitOpen(t, e, sb)
		return &out, bg
	}
	endedOut, endedBg := open(ended, "alpha")
	aliveOut, aliveBg := open(alive, "beta")
	e.auth.update(ended.fp, func(c *cred) { c.err = ErrSandboxEnded })

	start := time.Now()
	e.broker.Revoke(context.Background(), edgeapi.Invalidation{Kind: edgeapi.InvalidateAll})
	endedBg.Wait(t, 20*time.Second)
	if time.Since(start) > 2*time.Second || !strings.Contains(endedBg.Stderr.String(), "sandbox alpha has ended") || endedOut.String() != "" {
		t.Fatalf("after %v stdout %q stderr %q, want the ended sandbox's session closed at once with the reason",
			time.Since(start), endedOut.String(), endedBg.Stderr.String())
	}
	r := run(t, e.ssh(testCtx(t, sshCeiling), ended, "alpha", nil, "echo in"), nil)
	if r.code != 255 || !strings.Contains(r.stderr, "sandbox alpha has ended") {
		t.Fatalf("new connection: code %d stderr %q, want 255 and the reason (not the cached route)", r.code, r.stderr)
	}
	aliveBg.Wait(t, 20*time.Second)
	if aliveOut.String() != "still-open\n" {
		t.Fatalf("the other sandbox's session: stdout %q stderr %q, want it left alone", aliveOut.String(), aliveBg.Stderr.String())
	}
}
