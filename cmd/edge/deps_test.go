package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestEdgeDependencies keeps the edge binary free of the control plane's
// heavy parts: the store drivers, the job queue and Kubernetes clients.
// The edge is stateless; if it needs something from them, it asks control.
func TestEdgeDependencies(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	forbidden := []string{
		"github.com/jackc/pgx",
		"github.com/riverqueue/",
		"modernc.org/sqlite",
		"github.com/mattn/go-sqlite3",
		"k8s.io/client-go",
		"github.com/sbxedge/sbx/control",
	}
	deps := strings.Fields(string(out))
	if len(deps) < 20 {
		t.Fatalf("go list -deps printed only %d packages; the check would be vacuous", len(deps))
	}
	for _, d := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("cmd/edge links %s (forbidden prefix %s)", d, f)
			}
		}
	}
}
