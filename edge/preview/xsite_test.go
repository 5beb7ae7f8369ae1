package preview_test

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
	"github.com/sbxedge/sbx/internal/testkit/metrictest"
)

// xsiteApp is the test app plus what the cross-site cases need: an
// endpoint that answers with its own CORS headers (a dev API that lets any
// origin read it) and one that tries to set cookies on other hosts.
func xsiteApp() http.Handler {
	app := newTestApp()
	mux := http.NewServeMux()
	mux.Handle("/", app)
	mux.HandleFunc("/cors", func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" {
			w.Header().Set("Access-Control-Allow-Origin", o)
			w.Header().Set("Access-Control-Allow-Credentials", "true")
		}
		_, _ = io.WriteString(w, "cors answer")
	})
	mux.HandleFunc("/cookies", func(w http.ResponseWriter, r *http.Request) {
		for _, c := range r.URL.Query()["c"] {
			w.Header().Add("Set-Cookie", c)
		}
		_, _ = io.WriteString(w, "cookies set")
	})
	return mux
}

// send writes req on a fresh connection to the proxy and reads the
// answer's head; a 101 is not read further (the WebSocket stays with the
// upstream until the connection closes). The body of anything else is
// returned.
func (e *env) send(req *http.Request) (*http.Response, string) {
	e.t.Helper()
	c, err := net.Dial("tcp", e.addr)
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req.Close = true
	if err := req.Write(c); err != nil {
		e.t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// seen counts the requests the upstream saw for host (the harness's one
// upstream serves every label; each keeps its Host unless rewritten).
func (u *upstreamLog) seen(host string) int {
	n := 0
	for _, r := range u.all() {
		if r.Host == host {
			n++
		}
	}
	return n
}

// TestCrossOriginCookieRequests is the policy as a table: a request that
// rides on the preview cookie is relayed only from the preview's own
// origin (or as a top-level navigation); token requests and public ports
// are not affected.
func TestCrossOriginCookieRequests(t *testing.T) {
	t.Parallel()
	e, m := newOIDCEnv(t, xsiteApp())
	e.expose("openpage", "sbx-b", "acct-b", true, false)
	m.QueueUser(user("alice"))
	ck, resp := login(t, e, "alicepage", "/")
	if ck == nil {
		t.Fatalf("alice's login ended with %d, no cookie", resp.StatusCode)
	}
	cookie := ck.Name + "=" + ck.Value
	own := "http://" + e.host("alicepage")
	sibling := "http://" + e.host("openpage")
	ws := []string{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="}
	nav := func(site, dest string) []string {
		return []string{"Sec-Fetch-Site", site, "Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", dest}
	}
	withWS := func(h ...string) []string { return append(append([]string(nil), ws...), h...) }

	for _, tc := range []struct {
		name   string
		label  string
		method string
		path   string
		hdr    []string
		// relayed: the upstream must see it, with this status;
		// otherwise 403 cross_origin_refused and the upstream sees nothing.
		relayed bool
		status  int
	}{
		// Cookie-authenticated, plain requests.
		{"GET, no browser headers (curl with a cookie)", "alicepage", "GET", "/", []string{"Cookie", cookie}, true, 200},
		{"POST, no browser headers", "alicepage", "POST", "/", []string{"Cookie", cookie}, true, 200},
		{"POST from its own origin", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", own, "Sec-Fetch-Site", "same-origin"}, true, 200},
		{"POST own origin, old browser (Origin only)", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", own}, true, 200},
		{"POST same-origin with Origin null (Referrer-Policy no-referrer)", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", "null", "Sec-Fetch-Site", "same-origin"}, true, 200},
		{"POST user-initiated (Sec-Fetch-Site none)", "alicepage", "POST", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "none"}, true, 200},
		{"navigation from a sibling (a link)", "alicepage", "GET", "/", append([]string{"Cookie", cookie}, nav("same-site", "document")...), true, 200},
		{"navigation from another site (a link in a PR)", "alicepage", "GET", "/", append([]string{"Cookie", cookie}, nav("cross-site", "document")...), true, 200},
		{"navigation, browser without Sec-Fetch-Dest", "alicepage", "GET", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "navigate"}, true, 200},
		{"same-origin fetch", "alicepage", "GET", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty"}, true, 200},

		{"POST from a sibling preview (Sec-Fetch-Site same-site)", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-site"}, false, 0},
		{"POST from another site", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, false, 0},
		{"POST same-site without Origin", "alicepage", "POST", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-site"}, false, 0},
		{"POST sibling Origin, old browser", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", sibling}, false, 0},
		{"POST Origin null, old browser (sandboxed frame)", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", "null"}, false, 0},
		{"POST own host over the other scheme", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", "https://" + e.host("alicepage")}, false, 0},
		{"POST own host on another port", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", "http://alicepage." + domain + ":1"}, false, 0},
		{"POST two Origin headers", "alicepage", "POST", "/", []string{"Cookie", cookie, "Origin", own, "Origin", sibling}, false, 0},
		{"PUT from a sibling", "alicepage", "PUT", "/", []string{"Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-site"}, false, 0},
		{"DELETE from a sibling", "alicepage", "DELETE", "/", []string{"Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-site"}, false, 0},
		{"PATCH from a sibling", "alicepage", "PATCH", "/", []string{"Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-site"}, false, 0},
		{"form POST navigation from a sibling", "alicepage", "POST", "/", append([]string{"Cookie", cookie, "Origin", sibling}, nav("same-site", "document")...), false, 0},
		{"unknown Sec-Fetch-Site value", "alicepage", "POST", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-planet"}, false, 0},
		// A credentialed read (the upstream's CORS would grant it), a
		// frame (clickjacking) and a subresource (script inclusion) from
		// a sibling are not same-origin either.
		{"credentialed fetch GET from a sibling", "alicepage", "GET", "/cors", []string{"Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors", "Sec-Fetch-Dest", "empty"}, false, 0},
		{"credentialed GET, old browser", "alicepage", "GET", "/cors", []string{"Cookie", cookie, "Origin", sibling}, false, 0},
		{"sibling frames it", "alicepage", "GET", "/", append([]string{"Cookie", cookie}, nav("same-site", "iframe")...), false, 0},
		{"sibling includes it as a script", "alicepage", "GET", "/", []string{"Cookie", cookie, "Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "no-cors", "Sec-Fetch-Dest", "script"}, false, 0},

		// WebSockets need their own origin, exactly.
		{"WebSocket from its own origin", "alicepage", "GET", "/ws", withWS("Cookie", cookie, "Origin", own), true, 101},
		{"WebSocket from a sibling", "alicepage", "GET", "/ws", withWS("Cookie", cookie, "Origin", sibling), false, 0},
		{"WebSocket without Origin (non-browser with a cookie)", "alicepage", "GET", "/ws", withWS("Cookie", cookie), false, 0},
		{"WebSocket Origin null", "alicepage", "GET", "/ws", withWS("Cookie", cookie, "Origin", "null"), false, 0},
		{"WebSocket own origin with a path", "alicepage", "GET", "/ws", withWS("Cookie", cookie, "Origin", own+"/"), false, 0},
		{"WebSocket sibling claiming same-origin metadata", "alicepage", "GET", "/ws", withWS("Cookie", cookie, "Origin", sibling, "Sec-Fetch-Site", "same-origin"), false, 0},

		// Tokens are not ambient: any origin may use one it holds.
		{"POST with a bearer token from a sibling", "alicepage", "POST", "/", []string{"Authorization", "Bearer " + tokenA, "Origin", sibling, "Sec-Fetch-Site", "same-site"}, true, 200},
		{"POST with the preview-token header from another site", "alicepage", "POST", "/", []string{"X-Sbx-Preview-Token", tokenA, "Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, true, 200},
		{"WebSocket with a bearer token from a sibling", "alicepage", "GET", "/ws", withWS("Authorization", "Bearer "+tokenA, "Origin", sibling), true, 101},

		// Public ports stay public, cookie or not.
		{"public port, POST from another site", "openpage", "POST", "/", []string{"Origin", "http://evil.example", "Sec-Fetch-Site", "cross-site"}, true, 200},
		{"public port, someone's cookie along", "openpage", "POST", "/", []string{"Cookie", cookie, "Origin", own, "Sec-Fetch-Site", "same-site"}, true, 200},
		{"public port, WebSocket from another site", "openpage", "GET", "/ws", withWS("Origin", "http://evil.example"), true, 101},
	} {
		host := e.host(tc.label)
		before := e.upstream.seen(host)
		req, err := http.NewRequest(tc.method, e.url(tc.label, tc.path), strings.NewReader("x=1"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(tc.hdr); i += 2 {
			req.Header.Add(tc.hdr[i], tc.hdr[i+1])
		}
		resp, body := e.send(req)
		n := e.upstream.seen(host) - before
		switch {
		case tc.relayed && (resp.StatusCode != tc.status || n != 1):
			t.Errorf("%s: %d %q, upstream saw it %d times; want %d relayed once", tc.name, resp.StatusCode, body, n, tc.status)
		case !tc.relayed && (resp.StatusCode != 403 || !strings.Contains(body, "cross_origin_refused") || n != 0):
			t.Errorf("%s: %d %q, upstream saw it %d times; want 403 cross_origin_refused and nothing relayed", tc.name, resp.StatusCode, body, n)
		}
	}

	// A public port's own CORS answer passes untouched.
	req, _ := http.NewRequest("GET", e.url("openpage", "/cors"), nil)
	req.Header.Set("Origin", "http://evil.example")
	if resp, body := e.send(req); resp.Header.Get("Access-Control-Allow-Origin") != "http://evil.example" ||
		resp.Header.Get("Access-Control-Allow-Credentials") != "true" || body != "cors answer" {
		t.Errorf("public CORS: %d %v %q, want the upstream's own CORS headers", resp.StatusCode, resp.Header, body)
	}
	for _, r := range e.upstream.all() {
		if strings.Contains(r.Header.Get("Cookie"), "__Host-sbx") {
			t.Errorf("upstream %s %s saw our cookie", r.Method, r.Host)
		}
	}
}

// TestBrowserCrossSiteAttacks is the attack of issue 11 in a real
// browser: signed in to private preview A, the victim visits public
// preview B of another tenant, whose page tries to use A with the
// victim's cookie. A's upstream must see none of it; A's own page keeps
// its WebSocket.
func TestBrowserCrossSiteAttacks(t *testing.T) {
	t.Parallel()
	e, ctx := signedInBrowser(t)
	// A's own page: its WebSocket (HMR, a terminal) works.
	echo, err := chromedp.Run(ctx, chromedp.Evaluate[string](`new Promise(res => {
		const ws = new WebSocket("ws://" + location.host + "/ws");
		ws.onopen = () => ws.send("hi");
		ws.onmessage = e => { res(e.data); ws.close(); };
		ws.onclose = e => res("closed " + e.code);
	})`, chromedp.EvalAwaitPromise))
	if err != nil || echo != "echo: hi" {
		t.Fatalf("same-origin WebSocket on A: %q %v, want echo: hi", echo, err)
	}

	victim := e.host("alicepage")
	before := e.upstream.seen(victim)
	// B's app also tries to toss a cookie onto every sibling preview.
	toss := url.Values{"c": {"tossed=1; Domain=" + domain + "; Path=/"}}
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("openpage", "/cookies?"+toss.Encode()))); err != nil {
		t.Fatal(err)
	}
	// The browser's log of B's tab, until the check below has read it.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	console := chromedp.Console(cctx)
	got, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]string](`(async (A) => {
		const out = {};
		out.websocket = await new Promise(res => {
			const ws = new WebSocket(A.replace("http:", "ws:") + "/ws");
			ws.onopen = () => ws.send("steal");
			ws.onmessage = e => { res("relayed: " + e.data); ws.close(); };
			ws.onclose = e => res("closed " + e.code);
		});
		const show = p => p.then(r => "status " + r.status + " " + r.type, e => "rejected " + e.name);
		out.post = await show(fetch(A + "/", {method: "POST", credentials: "include", body: "x=1"}));
		out.noCorsPost = await show(fetch(A + "/", {method: "POST", mode: "no-cors", credentials: "include", body: "x=1"}));
		out.read = await fetch(A + "/cors", {credentials: "include"}).then(r => r.text(), e => "rejected " + e.name);
		out.frame = await new Promise(res => {
			const f = document.createElement("iframe");
			f.onload = () => res("loaded");
			f.src = A + "/framed";
			document.body.append(f);
		});
		return out;
	})(`+strconv.Quote("http://"+victim)+`)`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("attack page: %v", err)
	}
	t.Logf("what B's page saw: %v", got)
	for _, r := range e.upstream.all()[before:] {
		if r.Host == victim {
			t.Errorf("A's upstream received %s %s (Origin %q) from B's page", r.Method, r.URL, r.Header.Get("Origin"))
		}
	}
	// B's page sees the refusal: the WebSocket never opens, the
	// credentialed fetches fail, nothing of A is read. The browser says
	// why in B's console.
	if got["websocket"] != "closed 1006" || got["post"] != "rejected TypeError" || got["read"] != "rejected TypeError" {
		t.Errorf("B's page saw %v, want the WebSocket closed 1006 unopened and both credentialed fetches rejected", got)
	}
	var saw403 bool
	for msg, err := range console {
		if err != nil {
			break
		}
		t.Logf("B's console: %s", msg.Text)
		if strings.Contains(msg.Text, "ws://"+victim) && strings.Contains(msg.Text, "403") {
			saw403 = true
			break
		}
	}
	if !saw403 {
		t.Errorf("B's console never reported the WebSocket handshake's 403")
	}

	// Back on A: still signed in, and without B's cookie.
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("alicepage", "/after"))); err != nil {
		t.Fatal(err)
	}
	if body, _ := chromedp.Run(ctx, chromedp.Text("body")); !strings.Contains(body, "path /after") {
		t.Errorf("A after the attack: %q, want A's page", body)
	}
	if r := e.upstream.last(); r == nil || r.Host != victim || strings.Contains(r.Header.Get("Cookie"), "tossed") {
		t.Errorf("A's upstream got Cookie %q: B's cookie reached A", r.Header.Get("Cookie"))
	}
}

// signedInBrowser is Chromium signed in to private preview alicepage
// (through OIDC, as alice), beside public preview openpage of another
// account: a victim and a sibling.
func signedInBrowser(t *testing.T) (*env, context.Context) {
	t.Helper()
	e, m := newOIDCEnv(t, xsiteApp())
	e.expose("openpage", "sbx-b", "acct-b", true, false)
	ctx := chromiumtest.New(t, 2*time.Minute)
	m.QueueUser(user("alice"))
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("alicepage", "/"))); err != nil {
		t.Fatal(err)
	}
	if body, _ := chromedp.Run(ctx, chromedp.Text("body")); !strings.Contains(body, "hello from the sandbox, host "+e.host("alicepage")) {
		t.Fatalf("after login: %q, want A's page", body)
	}
	return e, ctx
}

// TestUpstreamCookiesStayHostOnly: a sandbox's Set-Cookie reaches only its
// own preview host. A Domain attribute (the preview domain or a parent
// would plant the cookie on every sibling preview) is dropped, other
// attributes stay as the app wrote them, and our own cookie names cannot
// be set by the app.
func TestUpstreamCookiesStayHostOnly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, xsiteApp())
	e.expose("cookiejar", "sbx-b", "acct-b", true, false)
	for _, tc := range []struct{ set, want string }{
		{"a=1; Domain=" + domain + "; Path=/", "a=1; Path=/"},
		{"a=1; domain=." + domain, "a=1"},
		{"a=1; Path=/; DOMAIN = localhost; Secure", "a=1; Path=/; Secure"},
		{"a=1; Domain=cookiejar." + domain + "; HttpOnly", "a=1; HttpOnly"},
		{"a=1; Domain=otherhost." + domain, "a=1"},
		{"a=1; Domain=" + domain + "; Domain=cookiejar." + domain, "a=1"},
		{"a=1; Path=/; SameSite=None; Secure; Partitioned; Priority=High", "a=1; Path=/; SameSite=None; Secure; Partitioned; Priority=High"},
		{"a=x;domain=" + domain + ";path=/", "a=x;path=/"},
		{"__Host-sbx-preview=forged; Path=/; Secure", ""},
		{"__HOST-SBX-login=forged; Path=/; Secure", ""},
	} {
		q := url.Values{"c": {tc.set}}
		resp, _ := e.get("cookiejar", "/cookies?"+q.Encode())
		got := strings.Join(resp.Header.Values("Set-Cookie"), "\n")
		if got != tc.want {
			t.Errorf("sandbox sets %q: the browser gets %q, want %q", tc.set, got, tc.want)
		}
	}
	// Several at once: each is edited on its own.
	q := url.Values{"c": {"a=1; Domain=" + domain, "b=2", "__Host-sbx-preview=x", "c=3; Max-Age=60; Domain=" + domain}}
	resp, _ := e.get("cookiejar", "/cookies?"+q.Encode())
	if got, want := resp.Header.Values("Set-Cookie"), []string{"a=1", "b=2", "c=3; Max-Age=60"}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("several cookies: %q, want %q", got, want)
	}
}

// devLogin signs in through the sbx dev sign-in form with plain requests
// and returns the session cookie for label.
func devLogin(t *testing.T, e *env, label string) string {
	t.Helper()
	c := e.client()
	defer c.CloseIdleConnections()
	resp, err := c.Get(e.url("", "/login?rd="+url.QueryEscape(e.url(label, "/"))))
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	_, rest, _ := strings.Cut(string(page), `name="state" value="`)
	state, _, _ := strings.Cut(rest, `"`)
	var login *http.Cookie
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-sbx-login" {
			login = ck
		}
	}
	if state == "" || login == nil {
		t.Fatalf("dev login page: %d %q", resp.StatusCode, page)
	}
	req, _ := http.NewRequest("POST", e.url("", "/dev-login"), strings.NewReader(url.Values{"state": {state}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.AddCookie(login)
	if resp, err = c.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp, err = c.Get(resp.Header.Get("Location")); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for _, ck := range resp.Cookies() {
		if ck.Name == "__Host-sbx-preview" {
			return ck.Name + "=" + ck.Value
		}
	}
	t.Fatalf("ticket redemption: %d, no session cookie", resp.StatusCode)
	return ""
}

// TestCrossOriginRefusalWakesNothing: a refused request neither wakes a
// suspended sandbox nor opens an upstream channel; the same cookie from
// the preview's own origin then does both.
func TestCrossOriginRefusalWakesNothing(t *testing.T) {
	t.Parallel()
	w := &fakeWaker{}
	e := newEnv(t, newTestApp(), envOptions{waker: w})
	e.expose("sleepy", "sbx-a", "acct-a", false, false)
	cookie := devLogin(t, e, "sleepy")
	ready, _ := e.res.Resolve(t.Context(), "sleepy")
	e.res.set("sleepy", preview.Route{SandboxID: ready.SandboxID, AccountID: ready.AccountID, Port: ready.Port})
	e.proxy.Invalidate("sleepy")
	w.wake = func() { e.res.set("sleepy", ready) }

	sibling := "http://" + e.host("other")
	for _, hdr := range [][]string{
		{"Origin", sibling, "Sec-Fetch-Site", "same-site"},
		{"Connection", "Upgrade", "Upgrade", "websocket", "Sec-WebSocket-Version", "13", "Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==", "Origin", sibling},
	} {
		method := "POST"
		if len(hdr) > 4 {
			method = "GET"
		}
		req, _ := http.NewRequest(method, e.url("sleepy", "/ws"), nil)
		req.Header.Set("Cookie", cookie)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		if resp, body := e.send(req); resp.StatusCode != 403 || problemCode(t, body) != "cross_origin_refused" {
			t.Errorf("%s %v: %d %s, want 403 cross_origin_refused", method, hdr, resp.StatusCode, body)
		}
	}
	if n := w.count(); n != 0 {
		t.Errorf("refused requests woke the sandbox %d times", n)
	}
	if n := dials(t, e); n != 0 {
		t.Errorf("refused requests opened %d upstream channels", n)
	}
	req, _ := http.NewRequest("POST", e.url("sleepy", "/"), nil)
	req.Header.Set("Cookie", cookie)
	req.Header.Set("Origin", "http://"+e.host("sleepy"))
	// The wake's probe of the port is the request's connection on the
	// lean relay; httputil.ReverseProxy's transport opens one of its own.
	wantDials := uint64(1)
	if e.cfg.DisableLeanRelay {
		wantDials = 2
	}
	if resp, body := e.send(req); resp.StatusCode != 200 || w.count() != 1 || dials(t, e) != wantDials {
		t.Errorf("same-origin POST: %d %s, %d wakes, %d dials; want 200 after one wake and %d dials", resp.StatusCode, body, w.count(), dials(t, e), wantDials)
	}
}

// dials is how many upstream channels the proxy has opened.
func dials(t *testing.T, e *env) uint64 {
	t.Helper()
	return metrictest.Series(t, e.reg, "sbx_preview_upstream_dial_seconds").GetHistogram().GetSampleCount()
}
