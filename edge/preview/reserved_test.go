package preview

import (
	"net/http"
	"testing"
)

func TestReservedSegment(t *testing.T) {
	for _, tc := range []struct {
		path string
		want bool
	}{
		{"/", false},
		{"/app/page", false},
		{"/a/../b", false},
		{"/docs/x__sbx_preview", false},
		{"/__sbx_previe", false},
		{"/__sbx_preview", true}, // the namespace itself
		{"/__sbx_preview/", true},
		{"/__sbx_preview/ticket", true},
		{"/x/../__sbx_preview/ticket", true},
		{"//__sbx_preview/wake-status", true},
		{"/x\\__sbx_preview/sign-out", true},
		{"/__SBX_Preview/ticket", true},
		{"/a/__sbx_previewer", true}, // a server folding case or prefixes may read it as ours: refused
	} {
		if got := reservedSegment(tc.path); got != tc.want {
			t.Errorf("reservedSegment(%q) = %v, want %v", tc.path, got, tc.want)
		}
	}
}

// TestChecksAllocateNothing: the checks every request passes through
// (the reserved-path scan, the credential headers) cost no allocation.
func TestChecksAllocateNothing(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://a.preview.localhost/static/app.js?v=1", nil)
	r.Header.Set("Authorization", "Bearer sbx_at_token")
	if n := testing.AllocsPerRun(100, func() {
		_ = reservedSegment(r.URL.Path)
		_, _, _ = requestToken(r)
	}); n != 0 {
		t.Errorf("%v allocations per request, want 0", n)
	}
}
