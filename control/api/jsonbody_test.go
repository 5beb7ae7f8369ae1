package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// TestDuplicateKeys: a key twice in one object, at any depth and on any
// endpoint, is 400 duplicate_key naming the key's path, and so are two
// spellings of one field differing in case; the same key in different
// objects is fine, and so are a map's keys differing in case.
// encoding/json alone keeps the last value.
func TestDuplicateKeys(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	sb := e.createDev()
	project := "3f0c6e4e-8d6b-4c55-a2d3-6b1f9c1f7a10"
	cases := []struct {
		name, method, path, body string
		wantKey                  string // "" when the body has no duplicate
	}{
		{"top level", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","profile":"tuist-linux-huge"}`, "profile"},
		{"top level, other value first", "POST", "/api/v1/sandboxes", `{"deadline_minutes":5,"profile":"tuist-linux-small","deadline_minutes":900}`, "deadline_minutes"},
		{"nested in an array", "POST", "/api/v1/sandboxes",
			`{"profile":"tuist-linux-small","grants":[{"project_id":"` + project + `","scopes":["cache:read"],"scopes":["cache:write"]}]}`, "grants[0].scopes"},
		{"nested object", "POST", "/api/v1/sandboxes/" + sb.ID + "/exec", `{"command":"true","env":{"A":"1","B":"2","A":"3"}}`, "env.A"},
		{"patch", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"extend_minutes":5,"extend_minutes":50}`, "extend_minutes"},
		{"escaped spelling of the same key", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"extend_minutes":5,"extend\u005fminutes":50}`, "extend_minutes"},
		{"same key in sibling objects", "POST", "/api/v1/sandboxes",
			`{"profile":"tuist-linux-small","grants":[{"project_id":"` + project + `","scopes":["cache:read"]},{"project_id":"` + project + `","scopes":["cache:write"]}]}`, ""},
		{"map keys differing in case", "POST", "/api/v1/sandboxes/" + sb.ID + "/exec", `{"command":"true","env":{"A":"1","a":"2"}}`, ""},
		// encoding/json matches struct fields without regard to case, so
		// these set one field twice (issue 27 L2: a large sandbox).
		{"field differing in case", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","PROFILE":"tuist-linux-large"}`, "PROFILE"},
		{"field in mixed case, nested", "POST", "/api/v1/sandboxes",
			`{"profile":"tuist-linux-small","grants":[{"project_id":"` + project + `","scopes":["cache:read"],"Scopes":["cache:write"]}]}`, "grants[0].Scopes"},
		{"field differing in case, escaped", "PATCH", "/api/v1/sandboxes/" + sb.ID, `{"extend_minutes":5,"\u0045XTEND_minutes":50}`, "EXTEND_minutes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, b := e.do("dev", c.method, c.path, strings.NewReader(c.body))
			var p problemDoc
			_ = json.Unmarshal(b, &p)
			if c.wantKey == "" {
				if p.Code == "duplicate_key" {
					t.Fatalf("%s %s: %d %s, want no duplicate_key", c.method, c.body, code, b)
				}
				return
			}
			if code != 400 || p.Code != "duplicate_key" || !strings.Contains(p.Detail, fmt.Sprintf("%q", c.wantKey)) {
				t.Fatalf("%s %s: %d %s, want 400 duplicate_key naming %q", c.method, c.body, code, b, c.wantKey)
			}
		})
	}
}

// TestHugeNumber: a number too large for its field is a 422 naming the
// field, and the answer does not carry the client's number back whole.
func TestHugeNumber(t *testing.T) {
	e := newEnv(t, "sqlite", true)
	sb := e.createDev()
	code, _, b := e.do("dev", "PATCH", "/api/v1/sandboxes/"+sb.ID, strings.NewReader(`{"extend_minutes":`+strings.Repeat("9", 100000)+`}`))
	var p problemDoc
	_ = json.Unmarshal(b, &p)
	if code != 422 || !strings.Contains(p.Detail, "extend_minutes") || len(b) > 2000 {
		t.Fatalf("got %d, %d bytes: %.300s; want a short 422 naming extend_minutes", code, len(b), b)
	}
}
