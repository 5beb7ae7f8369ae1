package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control"
)

// TestDefaultProfile: GET /profiles marks the deployment's default
// profile, and a create that names none gets it; a deployment without a
// default refuses such a create naming the field.
func TestDefaultProfile(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, def string
		code      int
	}{
		{"with a default", "tuist-linux-medium", 201},
		{"without one", "", 422},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, "sqlite", true, func(cfg *control.Config) { cfg.Lifecycle.DefaultProfile = c.def })
			code, _, b := e.do("dev", "GET", "/api/v1/profiles", nil)
			var list struct {
				Profiles []struct {
					Name    string `json:"name"`
					Default bool   `json:"default"`
				} `json:"profiles"`
			}
			if code != 200 || json.Unmarshal(b, &list) != nil {
				t.Fatalf("profiles: %d %s", code, b)
			}
			var marked []string
			for _, p := range list.Profiles {
				if p.Default {
					marked = append(marked, p.Name)
				}
			}
			if want := strings.Fields(c.def); strings.Join(marked, " ") != strings.Join(want, " ") {
				t.Errorf("profiles marked default %v; want %v (%s)", marked, want, b)
			}

			code, _, b = e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{}`))
			if code != c.code {
				t.Fatalf("create without a profile: %d %s; want %d", code, b, c.code)
			}
			var sb struct {
				Profile string `json:"profile"`
			}
			if c.code == 201 && (json.Unmarshal(b, &sb) != nil || sb.Profile != c.def) {
				t.Errorf("created with profile %q; want the default %q", sb.Profile, c.def)
			}
			if c.code == 422 && !strings.Contains(string(b), "profile") {
				t.Errorf("refusal %s does not name profile", b)
			}
		})
	}
}
