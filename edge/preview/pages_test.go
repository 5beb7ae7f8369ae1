package preview_test

import (
	"net/http"
	"strings"
	"testing"
)

// browserNav are the headers a browser sends when a person opens an
// address in a tab.
var browserNav = []string{"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document", "Sec-Fetch-Site", "none", "Accept", "text/html"}

// TestPageShowsCommandsAsCode: a page's commands are set as code, not
// printed with the backticks they are written with.
func TestPageShowsCommandsAsCode(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	resp, body := e.get("nosuchhost", "/", browserNav...)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(body, "No preview at this address") {
		t.Fatalf("navigation to an unknown host: %d %q, want the 404 page", resp.StatusCode, body)
	}
	if strings.Contains(body, "`") {
		t.Errorf("the 404 page shows a literal backtick: %q", body)
	}
	if want := "<code>sbx ports &lt;sandbox&gt;</code>"; !strings.Contains(body, want) {
		t.Errorf("the 404 page lacks %q: %q", want, body)
	}
}

// TestPortClosedPageNamesTheSandbox: the page for a port nothing listens
// on gives the command that declares a service with the sandbox's id
// filled in, on a private preview; a public one's visitors are not told
// the id.
func TestPortClosedPageNamesTheSandbox(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	closed := freePort(t)
	for _, tc := range []struct {
		name, label string
		public      bool
		want, never string
	}{
		{"private", "closedpriv", false, "<code>sbx services set sbx-a &lt;name&gt; --port", "&lt;id&gt;"},
		{"public", "closedpub", true, "<code>sbx services set &lt;id&gt; &lt;name&gt; --port", "sbx-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e.expose(tc.label, "sbx-a", "acct-a", tc.public, false)
			rt, _ := e.res.Resolve(t.Context(), tc.label)
			rt.Port = closed
			e.res.set(tc.label, rt)
			resp, body := e.get(tc.label, "/", append([]string{"Authorization", "Bearer " + tokenA}, browserNav...)...)
			if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, "Nothing is listening on this port") {
				t.Fatalf("navigation to a closed port: %d %q, want the 502 page", resp.StatusCode, body)
			}
			if !strings.Contains(body, tc.want) || strings.Contains(body, tc.never) {
				t.Errorf("the 502 page: want %q and never %q, got %q", tc.want, tc.never, body)
			}
			// An API client still gets the problem document.
			resp, body = e.get(tc.label, "/", "Authorization", "Bearer "+tokenA, "Accept", "application/json")
			if resp.StatusCode != http.StatusBadGateway || problemCode(t, body) != "upstream_unreachable" {
				t.Errorf("API client to a closed port: %d %s, want a 502 upstream_unreachable problem", resp.StatusCode, body)
			}
		})
	}
}
