package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// TestShareLinkInBrowser is issue 31's must-show for share links, with
// two edge replicas behind one control and Redis: a share link opens a
// private port in a fresh browser with no sign-in; the secret is gone
// from the address bar after the first load; the page's WebSocket, open
// through the SECOND replica, is closed within 5 s of the link being
// revoked through the API; the link then shows the designed page saying
// it was revoked.
func TestShareLinkInBrowser(t *testing.T) {
	ps := startPreviewStack(t)
	s := ps.stack
	second := reservePort(t)
	ctx2, cancel2 := context.WithCancel(context.Background())
	ps.startEdge(t, ctx2, cancel2, second, "edge2")

	id := s.readySandbox(t)
	app := wstest.App(t)
	var pv struct{ URL, Label string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": app, "label": "web"}, &pv); code != 201 || pv.Label != "web" {
		t.Fatalf("POST ports: %d %+v, want 201 with label web", code, pv)
	}
	var sh struct{ ID, URL, State string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(app)+"/shares",
		map[string]any{"expires_in_minutes": 120, "note": "for design review"}, &sh); code != 201 {
		t.Fatalf("POST shares: %d", code)
	}
	link, err := url.Parse(sh.URL)
	if err != nil || link.Query().Get("sbx_share") == "" || !strings.HasPrefix(sh.URL, pv.URL) {
		t.Fatalf("share URL %q: want the preview URL %s with its secret", sh.URL, pv.URL)
	}
	secret := link.Query().Get("sbx_share")

	// A fresh profile, nobody signed in: the link alone opens the app.
	// The exchange happens on the first replica (the port control's URLs
	// name); the cookie it sets is for the host, so the page is then
	// served by the second replica, whose WebSocket the revocation must
	// reach.
	bctx := chromiumtest.New(t, 2*time.Minute)
	documents, _ := chromiumtest.Documents(t, bctx)
	if err := chromedp.Do(bctx, chromedp.Navigate(sh.URL), chromedp.WaitVisible("#msg")); err != nil {
		t.Fatalf("open the share link: %v", err)
	}
	first, err := chromedp.Run(bctx, chromedp.Location())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(first, secret) || strings.Contains(first, "sbx_share") {
		t.Errorf("address bar after the first load: %q still carries the secret", first)
	}
	onSecond := strings.Replace(first, ":"+strconv.Itoa(ps.previewPort)+"/", ":"+strconv.Itoa(second)+"/", 1)
	if onSecond == first {
		t.Fatalf("address %q names no edge port", first)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(onSecond), chromedp.WaitVisible("#msg")); err != nil {
		t.Fatalf("the page through the second replica: %v", err)
	}
	wsState := func() string {
		st, err := chromedp.Run(bctx, chromedp.Evaluate[string](`window.wsState`))
		if err != nil {
			t.Fatalf("read the page's WebSocket state: %v", err)
		}
		return st
	}
	for deadline := time.Now().Add(20 * time.Second); wsState() != "open"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the page's WebSocket through the second replica: %q, want open", wsState())
		}
	}
	for _, d := range documents() {
		if strings.Contains(d, "/login") || strings.Contains(d, ps.oidc.Issuer()) {
			t.Errorf("document %s: the share link must not send anyone to sign in", d)
		}
		if strings.Contains(d, secret) && !strings.HasPrefix(d, "303 ") {
			t.Errorf("document %s carried the secret past the exchange", d)
		}
	}

	// Listing shows the link, never its secret.
	var list struct {
		Shares []map[string]any `json:"shares"`
	}
	if code := s.call(t, "GET", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(app)+"/shares", nil, &list); code != 200 || len(list.Shares) != 1 {
		t.Fatalf("GET shares: %d %+v", code, list)
	}
	if l := list.Shares[0]; l["first_used_at"] == nil || l["url"] != nil || l["state"] != "active" {
		t.Errorf("listed share %v: want first_used_at set, state active and no url", l)
	}

	start := time.Now()
	if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(app)+"/shares/"+sh.ID, nil, nil); code != 204 {
		t.Fatalf("DELETE share: %d", code)
	}
	var st string
	for st = wsState(); !strings.HasPrefix(st, "closed") && time.Since(start) < wstest.RevokeWithin; st = wsState() {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(st, "closed 1008 ") {
		t.Fatalf("WebSocket on the second replica %v after revocation: %q, want closed 1008 with a reason", time.Since(start).Round(time.Millisecond), st)
	}
	t.Logf("second replica closed the shared WebSocket %v after revocation: %q", time.Since(start).Round(time.Millisecond), st)

	// The link, and the page it opened, now say the link was revoked.
	for _, u := range []string{sh.URL, onSecond} {
		if err := chromedp.Do(bctx, chromedp.Navigate(u), chromedp.WaitVisible("main.card")); err != nil {
			t.Fatalf("open %s after revocation: %v", u, err)
		}
		code, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector("main.card").dataset.code`))
		if err != nil {
			t.Fatal(err)
		}
		headline, err := chromedp.Run(bctx, chromedp.Text("h1"))
		if err != nil {
			t.Fatal(err)
		}
		if code != "share_revoked" || !strings.Contains(headline, "revoked") {
			t.Errorf("%s after revocation: code %q headline %q, want share_revoked saying the link was revoked", u, code, headline)
		}
		if meta, err := chromedp.Run(bctx, chromedp.Text("p.meta")); err != nil || !strings.Contains(meta, "web") {
			t.Errorf("%s after revocation: %q, %v; want the page to name the port's label web", u, meta, err)
		}
	}
	dir := chromiumtest.ArtifactDir(t)
	png := chromiumtest.Screenshot(t, bctx, dir, "share-revoked")
	if os.Getenv("SBX_UPDATE_SCREENSHOTS") != "" {
		b, err := os.ReadFile(png)
		if err == nil {
			err = os.WriteFile(filepath.Join("..", "..", "docs", "screenshots", "share-revoked.png"), b, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// shareClient reaches every preview host at the edge listening on
// proxyAddr and follows no redirect.
func shareClient(proxyAddr string) *http.Client {
	d := &net.Dialer{}
	return &http.Client{
		Timeout: 90 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, proxyAddr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// redeem opens a share link as a first visit does and returns the
// cookie header the edge set, after checking the redirect drops the
// secret.
func redeem(t *testing.T, hc *http.Client, link string) string {
	t.Helper()
	resp, err := hc.Get(link)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc := resp.Header.Get("Location")
	if resp.StatusCode != http.StatusSeeOther || strings.Contains(loc, "sbx_share") || len(resp.Cookies()) != 1 {
		t.Fatalf("share link: %d Location %q cookies %d, want 303 to the address without the secret, and one cookie", resp.StatusCode, loc, len(resp.Cookies()))
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || !c.Secure || c.Domain != "" || strings.Contains(c.Value, "sbx_sh_") {
		t.Errorf("share cookie %+v: want host-only, HttpOnly, Secure, without the secret", c)
	}
	return c.Name + "=" + c.Value
}

// TestShareLinkLifetimes: through cmd/edge and control, a WebSocket opened
// with a share link is closed when the link expires (the registry's
// expiry, no invalidation); a share link wakes a suspended sandbox; and it
// never wakes a deleted one, which answers 410 sandbox_ended.
func TestShareLinkLifetimes(t *testing.T) {
	ps := startPreviewStack(t)
	s := ps.stack
	proxy := "127.0.0.1:" + strconv.Itoa(ps.previewPort)
	hc := shareClient(proxy)
	id := s.readySandbox(t)
	app := wstest.App(t)
	var pv struct{ URL string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": app}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	get := func(u, cookie string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, u, nil)
		if cookie != "" {
			req.Header.Set("Cookie", cookie)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	t.Run("expiry closes the WebSocket", func(t *testing.T) {
		// The API's shortest link lives a minute; this one is written
		// to the store with a few seconds.
		secret, hash := token.New(token.PrefixShare)
		expires := time.Now().Add(3 * time.Second).UTC().Truncate(time.Microsecond)
		if err := s.svc.Store.InTx(t.Context(), func(tx store.Tx) error {
			return tx.InsertShare(t.Context(), store.Share{ID: "shr-short", SandboxID: id, AccountID: devseed.AccountID, Port: app,
				Hash: hash, CreatedAt: time.Now().UTC(), ExpiresAt: expires})
		}); err != nil {
			t.Fatal(err)
		}
		cookie := redeem(t, hc, pv.URL+"/?sbx_share="+url.QueryEscape(secret))
		ws := wstest.Dial(t, proxy, pv.URL, http.Header{"Cookie": {cookie}})
		wstest.WantPolicyClose(t, ws, expires, "share link expired")
		if code, body := get(pv.URL+"/", cookie); code != http.StatusGone || !strings.Contains(body, "share_expired") {
			t.Errorf("expired share: %d %q, want 410 share_expired", code, body)
		}
	})

	var sh struct{ ID, URL string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(app)+"/shares", map[string]any{"expires_in_minutes": 60}, &sh); code != 201 {
		t.Fatalf("POST shares: %d", code)
	}
	cookie := redeem(t, hc, sh.URL)

	t.Run("wakes a suspended sandbox", func(t *testing.T) {
		if err := s.svc.Life.Suspend(t.Context(), id, "test"); err != nil {
			t.Fatal(err)
		}
		var sb struct{ Status string }
		for deadline := time.Now().Add(time.Minute); sb.Status != "suspended"; time.Sleep(50 * time.Millisecond) {
			if s.call(t, "GET", "/api/v1/sandboxes/"+id, nil, &sb); time.Now().After(deadline) {
				t.Fatalf("sandbox %q after Suspend, want suspended", sb.Status)
			}
		}
		if code, body := get(pv.URL+"/", cookie); code != http.StatusOK || !strings.Contains(body, "ws page") {
			t.Fatalf("share link on a suspended sandbox: %d %q, want the app after a wake", code, body)
		}
	})
	t.Run("never wakes a deleted sandbox", func(t *testing.T) {
		if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id, nil, nil); code >= 300 {
			t.Fatalf("DELETE sandbox: %d", code)
		}
		for _, u := range []string{pv.URL + "/", sh.URL} {
			if code, body := get(u, cookie); code != http.StatusGone || !strings.Contains(body, "sandbox_ended") {
				t.Errorf("GET %s on a deleted sandbox: %d %q, want 410 sandbox_ended", u, code, body)
			}
		}
		var sb struct{ Status string }
		if s.call(t, "GET", "/api/v1/sandboxes/"+id, nil, &sb); sb.Status != "terminated" && sb.Status != "terminating" {
			t.Errorf("deleted sandbox is %q after share link visits", sb.Status)
		}
	})
}
