// Package inittest builds the sandbox's init (cmd/sbx-init) for tests
// that run it for real, such as a local sandbox in sshd mode, whose sshd
// runs "sbx-init ctl" for the init's subsystem.
package inittest

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles cmd/sbx-init into a directory removed when t ends and
// returns its absolute path. The go build cache makes every build after
// the first a link.
func Build(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sbx-init")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sbxedge/sbx/cmd/sbx-init")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sbx-init: %v\n%s", err, out)
	}
	return bin
}
