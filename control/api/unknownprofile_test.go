package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestUnknownProfileNamesProfiles: a create naming a profile that does
// not exist is a 422 problem whose detail and field error list the
// profiles that do, so the caller can pick one without another request.
func TestUnknownProfileNamesProfiles(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	code, hdr, body := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"no-such-profile"}`))
	if code != 422 || !strings.HasPrefix(hdr.Get("Content-Type"), "application/problem+json") {
		t.Fatalf("status %d, %s: %s; want a 422 problem", code, hdr.Get("Content-Type"), body)
	}
	var p struct {
		problemDoc
		Errors []struct{ Field, Detail string } `json:"errors"`
	}
	if err := json.Unmarshal(body, &p); err != nil {
		t.Fatal(err)
	}
	const known = "tuist-linux-large, tuist-linux-medium, tuist-linux-small"
	if p.Code != "unknown_profile" || p.Detail != `unknown profile: "no-such-profile"; profiles: `+known {
		t.Errorf("problem %+v, want unknown_profile naming %s", p.problemDoc, known)
	}
	if len(p.Errors) != 1 || p.Errors[0].Field != "profile" || !strings.HasSuffix(p.Errors[0].Detail, "one of: "+known) {
		t.Errorf("field errors %+v, want profile: one of %s", p.Errors, known)
	}
}
