package sshbroker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/sshscenario"
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
