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

// namedKits are test kits by name, whether or not they import "testing"
// today: the stores of Postgres and Redis for tests, the real-OpenSSH
// scenarios, the fault relay, the OpenAPI checker, the import checks.
var namedKits = []string{"internal/testkit/testdb", "internal/testkit/sshscenario", "internal/testkit/tcpproxy", "internal/testkit/apicheck", "internal/testkit/depcheck"}

// TestProductImportsNoTestKit: no package that ships (under cmd/,
// control/, edge/, auth/, activity/, internal/) imports a test kit — a
// package whose own code imports "testing", one named *test
// (controltest, redistest, kubetest, sshdtest, ...), or one of namedKits.
// Kits may use kits; a kit in a binary would bring its fakes and its
// real-server launchers along, and a fake credential or a disabled check
// one call away from production. Each binary's allow-list
// (cmd/*/testdata/deps.txt) names what it links; this states the rule.
func TestProductImportsNoTestKit(t *testing.T) {
	t.Parallel()
	imports := depcheck.Imports(t, depcheck.Module+"/...")
	isKit := map[string]bool{}
	for pkg, imps := range imports {
		last := pkg[strings.LastIndex(pkg, "/")+1:]
		named := slices.ContainsFunc(namedKits, func(k string) bool { return pkg == depcheck.Module+"/"+k })
		if named || strings.HasSuffix(last, "test") && !slices.Contains(harnesses, pkg) || slices.Contains(imps, "testing") {
			isKit[pkg] = true
		}
	}
	for _, k := range []string{"internal/testkit/testdb", "internal/testkit/redistest", "control/controltest", "edge/internal/sshdtest"} {
		if !isKit[depcheck.Module+"/"+k] {
			t.Fatalf("%s is not recognised as a test kit; the check would miss it", k)
		}
	}
	for pkg, imps := range imports {
		if isKit[pkg] || slices.Contains(harnesses, pkg) {
			continue
		}
		for _, imp := range imps {
			if isKit[imp] {
				t.Errorf("%s imports the test kit %s", pkg, imp)
			}
		}
	}
}
