// Package depcheck is a test kit for the repository's import rules:
// which packages each binary links, and which way imports flow
// (cmd → edge | control → auth | activity | internal).
package depcheck

import (
	"os"
	"os/exec"
	"slices"
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

// Golden fails t when pkg links a package the allow-list at path (one
// import path a line, as `go list -deps` prints them) does not name, and
// prints the difference both ways: a new dependency is a reviewed change
// to that file, not an accident. Packages the list names that pkg no
// longer links are reported too, so the list shrinks with the binary.
// Regenerate with: go list -deps ./cmd/NAME > cmd/NAME/testdata/deps.txt
func Golden(t testing.TB, pkg, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read the allow-list: %v", err)
	}
	allowed := map[string]bool{}
	for _, l := range strings.Fields(string(b)) {
		allowed[l] = true
	}
	linked := map[string]bool{}
	var added []string
	for _, d := range Deps(t, pkg) {
		linked[d] = true
		if !allowed[d] {
			added = append(added, "+ "+d)
		}
	}
	var gone []string
	for d := range allowed {
		if !linked[d] {
			gone = append(gone, "- "+d)
		}
	}
	slices.Sort(gone)
	if len(added) > 0 || len(gone) > 0 {
		t.Errorf("%s links %d packages not in %s and no longer links %d it names; review, then regenerate it (go list -deps %s > %s):\n%s",
			pkg, len(added), path, len(gone), pkg, path, strings.Join(append(added, gone...), "\n"))
	}
}

// Imports maps every package the pattern matches to the packages its
// non-test files import (go list's Imports: test files' imports are
// not part of it).
func Imports(t testing.TB, pattern string) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pattern).CombinedOutput()
	if err != nil {
		t.Fatalf("go list -f ... %s: %v\n%s", pattern, err, out)
	}
	m := map[string][]string{}
	for l := range strings.Lines(string(out)) {
		if f := strings.Fields(l); len(f) > 0 {
			m[f[0]] = f[1:]
		}
	}
	if len(m) < 5 {
		t.Fatalf("go list %s listed only %d packages; the check would be vacuous", pattern, len(m))
	}
	return m
}
