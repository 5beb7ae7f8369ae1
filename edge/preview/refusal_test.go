package preview_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

func problemCode(t *testing.T, body string) string {
	t.Helper()
	var p struct{ Code string }
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("not a problem document: %q", body)
	}
	return p.Code
}

func TestRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("siteaa", "sbx-a", "acct-a", false, false)
	e.expose("sitebb", "sbx-b", "acct-b", false, false)
	before := e.upstream.n.Load()

	for _, tc := range []struct {
		name   string
		label  string
		hdr    []string
		status int
		code   string
	}{
		{"no credential", "siteaa", nil, 401, "preview_unauthenticated"},
		{"unknown token", "siteaa", []string{"Authorization", "Bearer sbx_at_nope"}, 401, "preview_invalid_token"},
		{"token of another account", "siteaa", []string{"Authorization", "Bearer " + tokenB}, 403, "preview_forbidden"},
		{"preview token of another account", "sitebb", []string{"X-Sbx-Preview-Token", tokenA}, 403, "preview_forbidden"},
		{"forged cookie", "siteaa", []string{"Cookie", "__Host-sbx-preview=eyJ9.AAAA"}, 401, "preview_unauthenticated"},
		// One credential per request, as the API asks: with two, the proxy
		// acted on the first while whatever sits in front may read another.
		{"two bearer tokens", "siteaa", []string{"Authorization", "Bearer " + tokenA, "Authorization", "Bearer " + tokenB}, 400, "ambiguous_credentials"},
		{"two preview tokens", "siteaa", []string{"X-Sbx-Preview-Token", tokenA, "X-Sbx-Preview-Token", tokenB}, 400, "ambiguous_credentials"},
		{"unknown host", "nosuchhost", []string{"Authorization", "Bearer " + tokenA}, 404, "preview_not_found"},
	} {
		resp, body := e.get(tc.label, "/", tc.hdr...)
		if resp.StatusCode != tc.status || problemCode(t, body) != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, resp.StatusCode, body, tc.status, tc.code)
		}
		if resp.Header.Get("Access-Control-Allow-Origin") != "*" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json") {
			t.Errorf("%s: headers %v, want a CORS-readable problem document", tc.name, resp.Header)
		}
	}
	// A browser navigation is redirected to login (HTML errors only for
	// navigations), with the page it asked for as a validated target.
	resp, _ := e.get("siteaa", "/page?x=1", "Sec-Fetch-Mode", "navigate", "Accept", "text/html")
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusFound || loc.Host != e.host("")[1:] && loc.Host != domain+":"+strings.Split(e.addr, ":")[1] ||
		loc.Path != "/login" || loc.Query().Get("rd") != e.url("siteaa", "/page?x=1") {
		t.Errorf("navigation without session: %d Location %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := e.get("nosuchhost", "/", "Sec-Fetch-Mode", "navigate")
	if resp.StatusCode != 404 || !strings.Contains(body, "<html") || !strings.Contains(body, "preview_not_found") {
		t.Errorf("navigation to unknown host: %d %q, want an HTML 404", resp.StatusCode, body)
	}

	if n := e.upstream.n.Load() - before; n != 0 {
		for _, r := range e.upstream.all() {
			t.Logf("upstream saw %s %s", r.Method, r.URL)
		}
		t.Errorf("refused requests reached the sandbox %d times", n)
	}

	// Host games and smuggling on the wire: TestWireAttacks.

	// A deleted port stops at once once control invalidates it.
	if resp, _ := e.get("siteaa", "/", "Authorization", "Bearer "+tokenA); resp.StatusCode != 200 {
		t.Fatalf("before delete: %d", resp.StatusCode)
	}
	e.res.remove("siteaa")
	e.proxy.Invalidate("siteaa")
	if resp, body := e.get("siteaa", "/", "Authorization", "Bearer "+tokenA); resp.StatusCode != 404 || problemCode(t, body) != "preview_not_found" {
		t.Errorf("after delete: %d %s, want 404 preview_not_found", resp.StatusCode, body)
	}
}

func TestAllowCertificate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("livehost", "sbx-a", "acct-a", false, false)
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"livehost." + domain, true},
		{domain, true},
		{"deadhost." + domain, false},
		{"a.livehost." + domain, false},
		{"livehost." + domain + ":443", false},
		{"127.0.0.1", false},
		{"example.com", false},
	} {
		if err := e.proxy.AllowCertificate(t.Context(), tc.name); (err == nil) != tc.ok {
			t.Errorf("AllowCertificate(%q) = %v, want allowed=%v", tc.name, err, tc.ok)
		}
	}
}
