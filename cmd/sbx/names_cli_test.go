package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateNameAndLabelsFromCLI (issue 30): `sbx create --name --label`
// makes a sandbox found by its name wherever an ID is taken, and by its
// labels in `sbx list --label`; a label without "=" is a usage error
// (exit 2) that never reaches the API.
func TestCreateNameAndLabelsFromCLI(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	first := strings.TrimSpace(p.cli("create", "--name", "pr-1234", "--label", "pr=1234", "--label", "team=web", "-o", "id"))
	second := strings.TrimSpace(p.cli("create", "--label", "pr=99", "-o", "id"))
	if first == "" || second == "" || first == second {
		t.Fatalf("created %q and %q", first, second)
	}
	if got := strings.Fields(p.cli("list", "--label", "pr=1234", "-o", "id")); len(got) != 1 || got[0] != first {
		t.Errorf("sbx list --label pr=1234: %v, want [%s]", got, first)
	}
	if got := strings.Fields(p.cli("list", "--label", "pr=1234", "--label", "team=web", "-o", "id")); len(got) != 1 || got[0] != first {
		t.Errorf("sbx list with both labels: %v, want [%s]", got, first)
	}
	if got := strings.Fields(p.cli("list", "--label", "team=api", "-o", "id")); len(got) != 0 {
		t.Errorf("sbx list --label team=api: %v, want none", got)
	}
	if all := p.cli("list"); !strings.Contains(all, "pr-1234") || !strings.Contains(all, "pr=1234") {
		t.Errorf("sbx list does not show the name and labels:\n%s", all)
	}
	if out := p.cli("exec", "pr-1234", "--", "echo", "by-name"); strings.TrimSpace(out) != "by-name" {
		t.Errorf("sbx exec by name: %q", out)
	}

	cmd := exec.Command(sbxBinary(t), "create", "--label", "no-equals")
	cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--label") {
		t.Errorf("sbx create --label no-equals: %v\n%s\nwant exit 2 naming --label", err, out)
	}
	if got := strings.Fields(p.cli("list", "-o", "id")); len(got) != 2 {
		t.Errorf("after the refused create: %d sandboxes, want 2", len(got))
	}
}
