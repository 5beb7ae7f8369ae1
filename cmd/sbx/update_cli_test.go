package main

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// cliStatus runs a client command and returns its output and exit code,
// for the refusals p.cli would fail the test on.
func (p *devProc) cliStatus(args ...string) (string, int) {
	p.t.Helper()
	out, err := p.cliCmd(args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		p.t.Fatalf("sbx %v: %v", args, err)
	}
	return string(out), 0
}

// TestUpdateAndNameColumnFromCLI (issue 30): `sbx update NAME` changes
// the idleness settings (a value out of range is refused naming the
// field, nothing to change is a usage error), `sbx destroy
// --delete-snapshots` takes the sandbox's snapshots with it (without it
// they stay), and the rows `sbx stop`, `sbx start` and `sbx get` print
// carry the sandbox's NAME.
func TestUpdateAndNameColumnFromCLI(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	id := strings.TrimSpace(p.cli("create", "--name", "web", "-o", "id"))

	var sb struct {
		Idle      int  `json:"idle_timeout_minutes"`
		KeepAwake bool `json:"keep_awake_while_busy"`
		Retention int  `json:"retention_days"`
	}
	if err := json.Unmarshal([]byte(p.cli("update", "web", "--idle-timeout", "2", "--keep-awake=false", "--retention-days", "3", "-o", "json")), &sb); err != nil {
		t.Fatal(err)
	}
	if sb.Idle != 2 || sb.KeepAwake || sb.Retention != 3 {
		t.Fatalf("after sbx update: %+v", sb)
	}
	if out, code := p.cliStatus("update", "web", "--retention-days", "0"); code == 0 || !strings.Contains(out, "retention_days") || !strings.Contains(out, "from 1 to") {
		t.Errorf("sbx update --retention-days 0: exit %d\n%s\nwant a refusal naming retention_days and its range", code, out)
	}
	if out, code := p.cliStatus("update", "web"); code != 2 || !strings.Contains(out, "nothing to change") {
		t.Errorf("sbx update with no flag: exit %d\n%s\nwant 2", code, out)
	}

	// Two sandboxes with a snapshot each: destroyed without the flag, the
	// snapshot stays; with --delete-snapshots it goes with the sandbox.
	other := strings.TrimSpace(p.cli("create", "--name", "scratch", "-o", "id"))
	keptSnap := strings.TrimSpace(p.cli("snapshot", "web", "-o", "id"))
	goneSnap := strings.TrimSpace(p.cli("snapshot", "scratch", "-o", "id"))
	p.cli("destroy", "scratch", "--delete-snapshots")
	live := p.cli("snapshots", "-o", "id")
	if strings.Contains(live, goneSnap) || !strings.Contains(live, keptSnap) {
		t.Errorf("after sbx destroy %s --delete-snapshots, sbx snapshots lists\n%s\nwant %s and not %s", other, live, keptSnap, goneSnap)
	}

	for _, args := range [][]string{{"stop", "web"}, {"start", "web"}, {"get", "web"}} {
		out := p.cli(args...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || strings.Fields(lines[0])[1] != "NAME" || strings.Fields(lines[1])[0] != id || strings.Fields(lines[1])[1] != "web" {
			t.Errorf("sbx %v printed\n%s\nwant a NAME column holding web", args, out)
		}
	}
}
