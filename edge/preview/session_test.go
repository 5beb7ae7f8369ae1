package preview_test

import (
	"net/http"
	"testing"
)

// TestAmbiguousSessionCookie: a request carrying the session cookie more
// than once with different values is refused, whichever comes first,
// and reaches nothing; the same value twice is one cookie.
func TestAmbiguousSessionCookie(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("cookied", "sbx-a", "acct-a", false, false)
	cookie := devLogin(t, e, "cookied")
	other := "__Host-sbx-preview=forged"
	for _, tc := range []struct {
		name    string
		cookies []string // Cookie header lines
		want    int
	}{
		{"one cookie", []string{cookie}, 200},
		{"the same cookie twice", []string{cookie + "; " + cookie}, 200},
		{"ours, then another", []string{cookie + "; " + other}, 400},
		{"another, then ours", []string{other + "; " + cookie}, 400},
		{"in two Cookie lines", []string{other, cookie}, 400},
	} {
		before := e.upstream.seen(e.host("cookied"))
		req, _ := http.NewRequest("GET", e.url("cookied", "/c"), nil)
		for _, c := range tc.cookies {
			req.Header.Add("Cookie", c)
		}
		resp, body := e.send(req)
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d %s, want %d", tc.name, resp.StatusCode, body, tc.want)
		}
		if tc.want == 400 {
			if code := problemCode(t, body); code != "ambiguous_credentials" {
				t.Errorf("%s: problem %q, want ambiguous_credentials", tc.name, code)
			}
			if n := e.upstream.seen(e.host("cookied")) - before; n != 0 {
				t.Errorf("%s: the sandbox saw %d requests, want none", tc.name, n)
			}
		}
	}
}
