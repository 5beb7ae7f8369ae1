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
