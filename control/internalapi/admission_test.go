package internalapi

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// TestPreviewRouteAdmission: the edge is told lifecycle's answer in the
// seam's words, one per answer a route can carry; a Resolver that gave
// none leaves the field out, as an older control does.
func TestPreviewRouteAdmission(t *testing.T) {
	t.Parallel()
	routes := fakePreview{}
	for _, a := range []lifecycle.Admission{lifecycle.Ready, lifecycle.Starting, lifecycle.Wakeable, 0} {
		routes[a.String()] = previewroute.Route{SandboxID: "sb1", AccountID: "a1", Port: 3000, Admission: a}
	}
	ts := newTestServer(t, Deps{Preview: routes})
	for _, tc := range []struct {
		label string
		want  edgeapi.Admission
	}{
		{lifecycle.Ready.String(), edgeapi.AdmissionReady},
		{lifecycle.Starting.String(), edgeapi.AdmissionStarting},
		{lifecycle.Wakeable.String(), edgeapi.AdmissionWakeable},
		{lifecycle.Admission(0).String(), ""},
	} {
		resp, body := do(t, ts, http.MethodPost, edgeapi.PathPreviewRoute, "Bearer "+testSecret, `{"label":"`+tc.label+`"}`)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: status %d, want 200; %s", tc.label, resp.StatusCode, body)
		}
		var got map[string]any
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatal(err)
		}
		adm, present := got["admission"]
		if tc.want == "" {
			if present {
				t.Errorf("%s: body %s carries admission, want it left out", tc.label, body)
			}
			continue
		}
		if adm != string(tc.want) {
			t.Errorf("%s: admission %v, want %q; body %s", tc.label, adm, tc.want, body)
		}
	}
}
