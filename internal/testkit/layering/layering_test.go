package layering

import (
	"slices"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestImportsFlowOneWay: nothing under control/ links the edge, nothing
// under edge/ links control, and internal/ links neither, so the two
// sides meet only in cmd/ and through internal/edgeapi.
func TestImportsFlowOneWay(t *testing.T) {
	t.Parallel()
	m := depcheck.Module
	for _, r := range []struct{ pattern, forbidden string }{
		{m + "/control/...", m + "/edge"},
		{m + "/edge/...", m + "/control"},
		{m + "/internal/...", m + "/control"},
		{m + "/internal/...", m + "/edge"},
	} {
		// go list -deps of a pattern is the union over its packages.
		depcheck.Forbid(t, r.pattern, r.forbidden)
	}
}

// harnesses are programs that drive the product through test kits and
// ship in no image: the load and fault measurements run by hand.
var harnesses = []string{depcheck.Module + "/loadtest"}

// isKit: a test kit is shelved under internal/testkit/, or sits beside the
// one package it fakes or checks, named for it with "test" appended
// (controltest, storetest, podtcptest, sshdtest, ...).
func isKit(pkg string) bool {
	rel := strings.TrimPrefix(pkg, depcheck.Module+"/")
	return strings.HasPrefix(rel, "internal/testkit/") || strings.HasSuffix(rel, "test") && !slices.Contains(harnesses, pkg)
}

// TestProductImportsNoTestKit: outside _test.go files, nothing but a kit
// or a harness imports a test kit, and nothing else imports "testing"
// (so a new kit is shelved where this rule sees it). Kits may use kits; a
// kit in a binary would bring its fakes and its real-server launchers
// along, and a fake credential or a disabled check one call away from
// production. Each binary's allow-list (cmd/*/testdata/deps.txt) names
// what it links; this states the rule.
func TestProductImportsNoTestKit(t *testing.T) {
	t.Parallel()
	imports := depcheck.Imports(t, depcheck.Module+"/...")
	for _, k := range []string{"internal/testkit/testdb", "internal/testkit/redistest", "control/controltest", "edge/internal/sshdtest"} {
		if _, ok := imports[depcheck.Module+"/"+k]; !ok || !isKit(depcheck.Module+"/"+k) {
			t.Fatalf("%s is not listed as a test kit; the check would miss it", k)
		}
	}
	for pkg, imps := range imports {
		if isKit(pkg) || slices.Contains(harnesses, pkg) {
			continue
		}
		for _, imp := range imps {
			switch {
			case isKit(imp):
				t.Errorf("%s imports the test kit %s", pkg, imp)
			case imp == "testing":
				t.Errorf("%s imports testing: a test kit belongs under internal/testkit/ (or beside what it fakes, named NAMEtest)", pkg)
			}
		}
	}
}
