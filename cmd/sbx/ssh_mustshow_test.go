package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// The "must show" list, driven with the real OpenSSH client
// through `sbx dev`'s broker; TestSSHThroughBroker runs it for the
// embedded sandbox server and for the machine's sshd. The scenarios are
// the same code edge/sshbroker's tests run against sshd. (The 65 s
// ServerAliveInterval hold, the 1,000-failed-auths rate limit and the
// 10,000-channel cap are broker properties and run in edge/sshbroker.)

// sshTo adapts a minted credential to the scenarios' SSH builder.
func sshTo(ta sshTarget) sshscenario.SSH {
	return func(ctx context.Context, opts []string, remote ...string) *exec.Cmd {
		args := append(append(ta.opts("-p"), opts...), ta.dest())
		return exec.CommandContext(ctx, "ssh", append(args, remote...)...)
	}
}

func testMustShow(t *testing.T, p *devProc, ta sshTarget, dir string) {
	ssh := sshTo(ta)
	t.Run("tty shell", func(t *testing.T) { sshscenario.TTYShell(t, ssh) })
	t.Run("200 MiB through stdin and back", func(t *testing.T) { sshscenario.BulkRoundTrip(t, ssh, 200<<20) })
	t.Run("ssh -L", func(t *testing.T) { sshscenario.LocalForward(t, ssh) })
	t.Run("ssh -D", func(t *testing.T) { sshscenario.DynamicForward(t, ssh) })
	t.Run("ssh -R", func(t *testing.T) { sshscenario.RemoteForward(t, ssh) })
	t.Run("VS Code pattern", func(t *testing.T) { sshscenario.VSCodePattern(t, ssh) })
	t.Run("150 commands over one ControlMaster", func(t *testing.T) { sshscenario.Multiplexed(t, ssh, 150) })
	t.Run("50 parallel sessions", func(t *testing.T) {
		t.Run("one sandbox", func(t *testing.T) { sshscenario.ParallelSessions(t, []sshscenario.SSH{ssh}, 50) })
		t.Run("ten sandboxes", func(t *testing.T) {
			targets := []sshTarget{ta}
			for len(targets) < 10 {
				targets = append(targets, mint(t, p, createReady(t, p), dir))
			}
			var fns []sshscenario.SSH
			for _, o := range targets {
				fns = append(fns, sshTo(o))
			}
			sshscenario.ParallelSessions(t, fns, 50)
			// Free the account's slots (limit 10) for the tests that follow.
			for _, o := range targets[1:] {
				if code := p.call("DELETE", "/api/v1/sandboxes/"+o.id, nil, nil); code != 200 {
					t.Fatalf("delete %s: %d", o.id, code)
				}
			}
			for _, o := range targets[1:] {
				p.waitStatus(o.id, "terminated", 30*time.Second)
			}
		})
	})
	t.Run("refusals without a reason", func(t *testing.T) {
		for _, c := range []struct {
			name, user string
			opts       []string
		}{
			{"unknown user", "nosuchsandbox", nil},
			{"password auth", ta.id, []string{"-o", "PubkeyAuthentication=no", "-o", "PreferredAuthentications=password,keyboard-interactive"}},
		} {
			t.Run(c.name, func(t *testing.T) {
				who := ta
				who.id = c.user
				out, errOut, code := runTool(t, "", "ssh", append(append(who.opts("-p"), c.opts...), who.dest(), "echo in")...)
				if code != 255 || out != "" || !strings.Contains(errOut, "Permission denied (publickey)") || strings.Contains(errOut, "sbx:") {
					t.Fatalf("got exit %d stdout %q stderr %q; want 255, publickey only, no reason", code, out, errOut)
				}
			})
		}
	})
}
