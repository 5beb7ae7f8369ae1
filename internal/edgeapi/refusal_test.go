package edgeapi

import "testing"

// TestRefusalsRoundTrip: every refusal's code leads back to it, so a
// refusal that crosses the seam as a problem is the same value on the
// other side.
func TestRefusalsRoundTrip(t *testing.T) {
	t.Parallel()
	if len(refusals) != 14 {
		t.Fatalf("%d refusals registered, want 14 (one per declared value, codes unique)", len(refusals))
	}
	for code, r := range refusals {
		if r.Code != code || RefusalOf(code) != r || r.Status < 400 || r.Error() == "" {
			t.Errorf("refusal %q: %+v", code, r)
		}
	}
	if RefusalOf(CodeInternal) != nil {
		t.Error("a fault's code names a refusal")
	}
}
