package preview_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// newOIDCEnv runs a real OIDC provider (mockoidc) and a proxy signing in
// through it. alice belongs to acct-a, bob to acct-b. The sandbox runs
// app, or the test app.
func newOIDCEnv(t *testing.T, app ...http.Handler) (*env, *mockoidc.MockOIDC) {
	t.Helper()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	cfg := m.Config()
	var h http.Handler = newTestApp()
	if len(app) > 0 {
		h = app[0]
	}
	e := newEnv(t, h, envOptions{oidc: &preview.OIDCConfig{Issuer: cfg.Issuer, ClientID: cfg.ClientID, ClientSecret: cfg.ClientSecret}})
	e.expose("alicepage", "sbx-a", "acct-a", false, false)
	e.expose("bobpage", "sbx-b", "acct-b", false, false)
	e.oidc = m
	return e, m
}

func user(sub string) *mockoidc.MockUser {
	return &mockoidc.MockUser{Subject: sub, Email: sub + "@example.com", EmailVerified: true}
}

func TestBrowserLoginThroughOIDC(t *testing.T) {
	t.Parallel()
	e, m := newOIDCEnv(t)
	ctx := chromiumtest.New(t, 90*time.Second)

	m.QueueUser(user("alice"))
	target := e.url("alicepage", "/dash?x=1")
	if err := chromedp.Do(ctx, chromedp.Navigate(target)); err != nil {
		t.Fatal(err)
	}
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	body, err := chromedp.Run(ctx, chromedp.Text("body"))
	if err != nil {
		t.Fatal(err)
	}
	if loc != target || !strings.Contains(body, "hello from the sandbox") || !strings.Contains(body, "path /dash?x=1") {
		t.Fatalf("after login: at %q showing %q, want %q showing the sandbox's page", loc, body, target)
	}
	// The cookie holds: another page of the same host needs no login (the
	// provider's queue is empty now, so a second login would sign in a
	// stranger and be refused).
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("alicepage", "/second"))); err != nil {
		t.Fatal(err)
	}
	body, _ = chromedp.Run(ctx, chromedp.Text("body"))
	if !strings.Contains(body, "path /second") {
		t.Errorf("second page: %q, want the sandbox's page without a new login", body)
	}
	// The sandbox never saw a credential of ours.
	for _, r := range e.upstream.all() {
		if strings.Contains(r.Header.Get("Cookie"), "__Host-sbx") || r.Header.Get("Authorization") != "" ||
			strings.Contains(r.URL.RawQuery, "t=") || strings.HasPrefix(r.URL.Path, "/__sbx_preview") {
			t.Errorf("upstream request %s carried a credential: Cookie %q Authorization %q", r.URL, r.Header.Get("Cookie"), r.Header.Get("Authorization"))
		}
	}

	// bob is a real user of the provider but not of acct-a: refused,
	// after the provider vouched for him, with an HTML page.
	bctx := chromiumtest.New(t, 60*time.Second)
	m.QueueUser(user("bob"))
	if err := chromedp.Do(bctx, chromedp.Navigate(target)); err != nil {
		t.Fatal(err)
	}
	body, _ = chromedp.Run(bctx, chromedp.Text("body"))
	if !strings.Contains(body, "preview_forbidden") || strings.Contains(body, "hello from the sandbox") {
		t.Errorf("bob on alice's preview: %q, want preview_forbidden", body)
	}
}

// login walks the browser flow with plain HTTP requests (no redirects
// followed automatically) and returns the session cookie it ends with.
func login(t *testing.T, e *env, label, path string) (*http.Cookie, *http.Response) {
	t.Helper()
	c := e.client()
	defer c.CloseIdleConnections()
	ext := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var loginCookie *http.Cookie
	next := e.url(label, path)
	for range 8 {
		req, _ := http.NewRequest("GET", next, nil)
		req.Header.Set("Sec-Fetch-Mode", "navigate")
		if loginCookie != nil {
			req.AddCookie(loginCookie)
		}
		client := c
		if u, _ := url.Parse(next); !strings.HasSuffix(u.Hostname(), domain) {
			client = ext // the provider
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		for _, ck := range resp.Cookies() {
			switch ck.Name {
			case "__Host-sbx-login":
				loginCookie = ck
			case "__Host-sbx-preview":
				if !ck.Secure || !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/" || ck.Domain != "" {
					t.Errorf("session cookie attributes %+v: want Secure, HttpOnly, SameSite=Lax, Path=/, host-only", ck)
				}
				return ck, resp
			}
		}
		if resp.StatusCode != http.StatusFound {
			return nil, resp
		}
		next = resp.Header.Get("Location")
	}
	t.Fatal("login did not finish in 8 redirects")
	return nil, nil
}

func TestLoginRefusals(t *testing.T) {
	t.Parallel()
	e, m := newOIDCEnv(t)

	m.QueueUser(user("alice"))
	aliceCookie, resp := login(t, e, "alicepage", "/")
	if aliceCookie == nil {
		t.Fatalf("alice's login ended with %d, no cookie", resp.StatusCode)
	}
	if resp, body := e.get("alicepage", "/x", "Cookie", aliceCookie.Name+"="+aliceCookie.Value); resp.StatusCode != 200 {
		t.Fatalf("alice's cookie on her host: %d %s", resp.StatusCode, body)
	}
	// Her cookie is bound to her host and sandbox: presented at bob's
	// host (a sibling under the same site) it counts for nothing.
	before := e.upstream.n.Load()
	if resp, body := e.get("bobpage", "/", "Cookie", aliceCookie.Name+"="+aliceCookie.Value); resp.StatusCode != 401 || problemCode(t, body) != "preview_unauthenticated" {
		t.Errorf("alice's cookie on bob's host: %d %s, want 401", resp.StatusCode, body)
	}
	// Also when bob's host routes to the same account's other sandbox.
	e.expose("alicetwo", "sbx-a2", "acct-a", false, false)
	if resp, _ := e.get("alicetwo", "/", "Cookie", aliceCookie.Name+"="+aliceCookie.Value); resp.StatusCode != 401 {
		t.Errorf("alice's cookie on her other sandbox's host: %d, want 401", resp.StatusCode)
	}
	if n := e.upstream.n.Load() - before; n != 0 {
		t.Errorf("refused cookies reached a sandbox %d times", n)
	}

	// bob signs in for alice's page: the provider says yes, we say no.
	m.QueueUser(user("bob"))
	if ck, resp := login(t, e, "alicepage", "/"); ck != nil || resp.StatusCode != 403 {
		t.Errorf("bob on alice's page: cookie %v status %d, want 403 and no cookie", ck, resp.StatusCode)
	}

	// Open redirects: only this proxy's own live preview hosts, spelled
	// exactly, are return targets.
	port := strings.Split(e.addr, ":")[1]
	for _, rd := range []string{
		"http://evil.example/",
		"https://alicepage." + domain + ":" + port + "/",
		"http://alicepage." + domain + ":1/",
		"http://alicepage." + domain + "/",
		"http://alicepage." + domain + ":" + port + "//evil.example/",
		"http://user@alicepage." + domain + ":" + port + "/",
		"http://a.alicepage." + domain + ":" + port + "/",
		"//alicepage." + domain + ":" + port + "/",
		"javascript:alert(1)",
		"http://nosuchlabel." + domain + ":" + port + "/",
		"http://alicepage." + domain + ":" + port + "/__sbx_preview/ticket?t=x",
		// The ticket path spelled another way: the browser lands on it
		// decoded, and would redeem the t of whoever wrote the link.
		"http://alicepage." + domain + ":" + port + "/%5f_sbx_preview/ticket?t=x",
		"http://alicepage." + domain + ":" + port + "/__sbx_preview%2fticket?t=x",
		"http://alicepage." + domain + ":" + port + "/__sbx_preview/sign-out",
	} {
		resp, body := e.get("", "/login?rd="+url.QueryEscape(rd))
		if resp.StatusCode/100 != 4 || resp.Header.Get("Location") != "" || resp.Header.Get("Set-Cookie") != "" {
			t.Errorf("login rd=%q: %d Location %q %s, want a 4xx and no redirect", rd, resp.StatusCode, resp.Header.Get("Location"), body)
		}
	}
	// A backslash cannot turn the path into another host: the target is
	// rebuilt from the escaped path ("/%5Cevil.example/").
	if resp, _ := e.get("", "/login?rd="+url.QueryEscape("http://alicepage."+domain+":"+port+"/\\evil.example/")); resp.StatusCode != http.StatusFound ||
		!strings.Contains(resp.Header.Get("Location"), "/oidc/authorize") {
		t.Errorf("backslash path: %d Location %q, want a login for the escaped path", resp.StatusCode, resp.Header.Get("Location"))
	}
	// A callback without the login cookie, or with a state that does not
	// match it, is refused before any code exchange.
	if resp, body := e.get("", "/callback?code=abc&state=xyz"); resp.StatusCode != 400 || problemCode(t, body) != "login_invalid" {
		t.Errorf("callback without login cookie: %d %s", resp.StatusCode, body)
	}
	// A forged ticket is refused.
	if resp, _ := e.get("alicepage", "/__sbx_preview/ticket?t=e30.AAAA"); resp.StatusCode != 400 || resp.Header.Get("Set-Cookie") != "" {
		t.Errorf("forged ticket: %d, want 400 and no cookie", resp.StatusCode)
	}
}

// TestDevSignInPageRefusesFrames: the dev sign-in page's one button signs
// the browser in, so no other page (a sibling preview included) may
// frame it and have it clicked unseen.
func TestDevSignInPageRefusesFrames(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("framed", "sbx-a", "acct-a", false, false)
	resp, body := e.get("", "/login?rd="+url.QueryEscape(e.url("framed", "/")))
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `id="signin"`) {
		t.Fatalf("dev sign-in page: %d %q", resp.StatusCode, body)
	}
	if csp := resp.Header.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") {
		t.Errorf("Content-Security-Policy %q, want frame-ancestors 'none'", csp)
	}
	if xfo := resp.Header.Get("X-Frame-Options"); xfo != "DENY" {
		t.Errorf("X-Frame-Options %q, want DENY (browsers without CSP frame-ancestors)", xfo)
	}
}

// TestDevSignInPageIsDesigned: the dev sign-in page wears the error
// pages' design (their stylesheet, a card), and submitting it after its
// port was unexposed answers the browser with a designed page, not the
// problem document a script gets.
func TestDevSignInPageIsDesigned(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("soon-gone", "sbx-a", "acct-a", false, false)
	resp, page := e.get("", "/login?rd="+url.QueryEscape(e.url("soon-gone", "/")), browserNav...)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("dev sign-in page: %d %q", resp.StatusCode, page)
	}
	_, errPage := e.get("neverwas", "/", browserNav...)
	style := func(html string) string {
		i, j := strings.Index(html, "<style>"), strings.Index(html, "</style>")
		if i < 0 || j < i {
			return ""
		}
		return html[i+len("<style>") : j]
	}
	if es := style(errPage); es == "" || !strings.HasPrefix(style(page), es) || !strings.Contains(page, `<main class="card"`) {
		t.Errorf("the sign-in page does not wear the error pages' stylesheet and card:\n%s", page)
	}
	var cookie *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == "__Host-sbx-login" {
			cookie = c
		}
	}
	m := regexp.MustCompile(`name="state" value="([^"]+)"`).FindStringSubmatch(page)
	if cookie == nil || m == nil {
		t.Fatalf("sign-in page: cookie %v, state %v", cookie, m)
	}
	e.res.remove("soon-gone") // the port is unexposed while the page is open
	e.proxy.Invalidate("soon-gone")
	post := func(hdr ...string) (*http.Response, string) {
		req, _ := http.NewRequest("POST", e.url("", "/dev-login"), strings.NewReader(url.Values{"state": {m[1]}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.AddCookie(cookie)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		c := e.client()
		defer c.CloseIdleConnections()
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	resp, body := post("Sec-Fetch-Mode", "navigate", "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Dest", "document", "Accept", "text/html")
	if resp.StatusCode != http.StatusNotFound || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") ||
		!strings.Contains(body, `<main class="card"`) || strings.Contains(body, `"type":`) {
		t.Errorf("browser submitting sign-in after the port was unexposed: %d %s %q, want the designed 404 page",
			resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}
