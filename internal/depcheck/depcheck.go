// Package depcheck is a test kit for the repository's import rules:
// which packages each binary links, and which way imports flow
// (cmd → edge | control → auth | activity | internal).
package depcheck

import (
	"os/exec"
	"strings"
	"testing"
)

// Module is this repository's module path.
const Module = "github.com/sbxedge/sbx"

// ControlDrivers are what only control links: the store drivers, the
// job queue and the Kubernetes client. The edge and the sandbox's init
// forbid them: what they need from them, they ask control for.
var ControlDrivers = []string{
	"github.com/jackc/pgx",
	"github.com/riverqueue/",
	"modernc.org/sqlite",
	"github.com/mattn/go-sqlite3",
	"k8s.io/client-go",
}

// Deps lists the packages pkg links (go list -deps; a pattern gives the
// union), pkg included; tests are not part of it.
func Deps(t testing.TB, pkg string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list -deps %s printed only %d packages; the check would be vacuous", pkg, len(deps))
	}
	return deps
}

// Forbid fails t for every package pkg links whose path starts with one of
// the forbidden prefixes.
func Forbid(t testing.TB, pkg string, forbidden ...string) {
	t.Helper()
	for _, d := range Deps(t, pkg) {
		for _, f := range forbidden {
			if strings.HasPrefix(d, f) {
				t.Errorf("%s links %s (forbidden prefix %s)", pkg, d, f)
			}
		}
	}
}
