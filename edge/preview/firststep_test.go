package preview

import (
	"testing"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// TestFirstStep: the waking page's first step follows control's
// admission, not a state name; a route from a control that sends none is
// restored, as every route that was not pending was before.
func TestFirstStep(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		rt   Route
		want string
	}{
		{"ready", Route{Ready: true, Admission: edgeapi.AdmissionReady}, stepPort},
		{"starting", Route{Admission: edgeapi.AdmissionStarting}, stepStarting},
		{"wakeable", Route{Admission: edgeapi.AdmissionWakeable}, stepRestoring},
		{"older control", Route{}, stepRestoring},
	} {
		if got := firstStep(tc.rt); got != tc.want {
			t.Errorf("%s: firstStep(%+v) = %q, want %q", tc.name, tc.rt, got, tc.want)
		}
	}
}
