package layering

import (
	"testing"

	"github.com/sbxedge/sbx/internal/depcheck"
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
