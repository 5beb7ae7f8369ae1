package api_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/internal/egresspolicy"
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

// TestProfileNetwork: GET /profiles shows each profile's egress policy,
// open unless the deployment configured one, entries canonical.
func TestProfileNetwork(t *testing.T) {
	t.Parallel()
	locked := egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"GitHub.com", "*.npmjs.org:443"}})
	e := newEnv(t, "sqlite", true, func(cfg *control.Config) {
		cfg.Lifecycle.Network = map[string]*egresspolicy.Policy{"tuist-linux-small": locked}
	})
	code, _, b := e.do("dev", "GET", "/api/v1/profiles", nil)
	var list struct {
		Profiles []struct {
			Name    string            `json:"name"`
			Network egresspolicy.Spec `json:"network"`
		} `json:"profiles"`
	}
	if code != 200 || json.Unmarshal(b, &list) != nil || len(list.Profiles) == 0 {
		t.Fatalf("profiles: %d %s", code, b)
	}
	for _, p := range list.Profiles {
		want := `{"egress":"open"}`
		if p.Name == "tuist-linux-small" {
			want = `{"egress":"allowlist","allow":["github.com","*.npmjs.org:443"]}`
		}
		if got, _ := json.Marshal(p.Network); string(got) != want {
			t.Errorf("profile %s network %s, want %s", p.Name, got, want)
		}
	}
}
