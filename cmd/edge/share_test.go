package main

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/internal/chromiumtest"
	"github.com/sbxedge/sbx/internal/wstest"
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
