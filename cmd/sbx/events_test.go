package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// cliCmd is a client command of the real binary against p.
func (p *devProc) cliCmd(args ...string) *exec.Cmd {
	cmd := exec.Command(sbxBinary(p.t), args...)
	cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
	return cmd
}

// cli runs a client command of the real binary against p.
func (p *devProc) cli(args ...string) string {
	p.t.Helper()
	cmd := p.cliCmd(args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		p.t.Fatalf("sbx %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return stdout.String()
}

// TestCLIWaitsOnTheEventStream: `sbx create` returns a ready sandbox
// (it waits on the event stream), `sbx events` lists pending then ready,
// and `sbx events --follow` returns by itself once the sandbox ended.
func TestCLIWaitsOnTheEventStream(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		p := startDev(t, t.TempDir(), dbURL)
		var sb sbView
		if err := json.Unmarshal([]byte(p.cli("create", "--deadline", "30", "-o", "json")), &sb); err != nil || sb.Status != "ready" {
			t.Fatalf("sbx create: %+v %v; want a ready sandbox", sb, err)
		}
		states := func(out string) []string {
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				var ev struct{ State string }
				if err := json.Unmarshal([]byte(line), &ev); err != nil {
					t.Fatalf("event line %q: %v", line, err)
				}
				got = append(got, ev.State)
			}
			return got
		}
		if got := strings.Join(states(p.cli("events", sb.ID)), " "); got != "pending ready" {
			t.Fatalf("sbx events: %q, want pending ready", got)
		}
		p.cli("destroy", sb.ID)
		if got := strings.Join(states(p.cli("events", "--follow", sb.ID)), " "); got != "pending ready terminating terminated" {
			t.Fatalf("sbx events --follow: %q, want the whole life ending in terminated", got)
		}
	})
}
