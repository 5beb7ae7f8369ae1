package preview_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
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

// TestSignOut: a POST from the preview's own origin clears its session
// cookie; another origin (a sibling preview included), another method
// or another spelling of the path does not, and nothing of it reaches
// the app.
func TestSignOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("leaving", "sbx-a", "acct-a", false, false)
	cookie := devLogin(t, e, "leaving")
	own, sibling := "http://"+e.host("leaving"), "http://"+e.host("other")
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		hdr     []string
		want    int
		cleared bool
		page    bool // a page that says so, for a submitted form
	}{
		{"same origin, fetch", "POST", "/__sbx_preview/sign-out", []string{"Origin", own, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors"}, 204, true, false},
		{"same origin, form", "POST", "/__sbx_preview/sign-out", []string{"Origin", own, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "navigate"}, 200, true, true},
		{"old browser, own Origin", "POST", "/__sbx_preview/sign-out", []string{"Origin", own}, 204, true, false},
		{"not a browser", "POST", "/__sbx_preview/sign-out", nil, 204, true, false},
		{"sibling preview", "POST", "/__sbx_preview/sign-out", []string{"Origin", sibling, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "navigate"}, 403, false, false},
		{"another site", "POST", "/__sbx_preview/sign-out", []string{"Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"}, 403, false, false},
		{"old browser, another Origin", "POST", "/__sbx_preview/sign-out", []string{"Origin", sibling}, 403, false, false},
		{"GET, as an image or a link would", "GET", "/__sbx_preview/sign-out", []string{"Sec-Fetch-Site", "cross-site"}, 405, false, false},
		{"dot-segment spelling", "POST", "/x/../__sbx_preview/sign-out", []string{"Origin", own}, 400, false, false},
	} {
		before := e.upstream.seen(e.host("leaving"))
		req, _ := http.NewRequest(tc.method, e.url("leaving", tc.path), nil)
		req.Header.Set("Cookie", cookie)
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			req.Header.Set(tc.hdr[i], tc.hdr[i+1])
		}
		resp, body := e.send(req)
		cleared := false
		for _, c := range resp.Cookies() {
			if c.Name == "__Host-sbx-preview" && c.Value == "" && c.MaxAge < 0 && c.Path == "/" && c.Secure && c.HttpOnly {
				cleared = true
			}
		}
		if resp.StatusCode != tc.want || cleared != tc.cleared {
			t.Errorf("%s: %d, cookie cleared %v; want %d, %v (%s)", tc.name, resp.StatusCode, cleared, tc.want, tc.cleared, body)
		}
		if tc.page && !strings.Contains(body, "Signed out") {
			t.Errorf("%s: page %q, want one saying signed out", tc.name, body)
		}
		if n := e.upstream.seen(e.host("leaving")) - before; n != 0 {
			t.Errorf("%s: the app saw %d requests, want none", tc.name, n)
		}
	}
}

// TestBrowserSignOut, in a real browser: a sibling preview's page cannot
// sign the victim out of preview A (by fetch or by a submitted form, each
// with the victim's cookie attached), and A's own page can.
func TestBrowserSignOut(t *testing.T) {
	t.Parallel()
	e, ctx := signedInBrowser(t)
	// whoAmI is what a fetch of A from A's own page gets: 200 while signed in.
	whoAmI := func() int {
		t.Helper()
		if err := chromedp.Do(ctx, chromedp.Navigate(e.url("alicepage", "/page"))); err != nil {
			t.Fatal(err)
		}
		st, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/x").then(r => r.status)`, chromedp.EvalAwaitPromise))
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	if st := whoAmI(); st != 200 {
		t.Fatalf("signed in, A's fetch got %d, want 200", st)
	}

	signOut := "http://" + e.host("alicepage") + "/__sbx_preview/sign-out"
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("openpage", "/"))); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](`fetch(`+strconv.Quote(signOut)+`,
		{method: "POST", mode: "no-cors", credentials: "include"}).then(r => r.type, e => e.name)`, chromedp.EvalAwaitPromise)); err != nil {
		t.Fatal(err)
	}
	if st := whoAmI(); st != 200 {
		t.Errorf("after a sibling's fetch to sign-out, A's fetch got %d, want 200 (still signed in)", st)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("openpage", "/"))); err != nil {
		t.Fatal(err)
	}
	// A form the sibling submits: a top-level POST navigation to A.
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`(() => {
		const f = document.createElement("form");
		f.method = "POST";
		f.action = `+strconv.Quote(signOut)+`;
		document.body.append(f);
		f.submit();
		return true;
	})()`)); err != nil {
		t.Fatal(err)
	}
	// Until the tab has loaded the form's answer.
	for i := 0; ; i++ {
		at, err := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + " " + document.readyState`))
		if err == nil && at == signOut+" complete" {
			break
		}
		if i == 100 {
			t.Fatalf("the sibling's form never landed: at %q (%v)", at, err)
		}
		if err := chromedp.Do(ctx, chromedp.Sleep(100*time.Millisecond)); err != nil {
			t.Fatal(err)
		}
	}
	if body, _ := chromedp.Run(ctx, chromedp.Text("body")); !strings.Contains(body, "cross_origin_refused") {
		t.Errorf("the sibling's form got %q, want the cross-origin refusal", body)
	}
	if st := whoAmI(); st != 200 {
		t.Errorf("after a sibling's form to sign-out, A's fetch got %d, want 200 (still signed in)", st)
	}

	// A's own page signs out.
	st, err := chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/__sbx_preview/sign-out", {method: "POST"}).then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || st != 204 {
		t.Fatalf("A's own sign-out: %d %v, want 204", st, err)
	}
	st, err = chromedp.Run(ctx, chromedp.Evaluate[int](`fetch("/x").then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || st != 401 {
		t.Errorf("after signing out, A's fetch got %d %v, want 401", st, err)
	}
}
