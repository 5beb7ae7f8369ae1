package wstest

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// Member is the OIDC subject the browser tests sign in as: alice, a
// member of the account MemberOIDC names.
const Member = "alice"

// MemberOIDC runs a mock OIDC provider until the test ends and writes a
// members file in dir that makes Member (at that provider) a member of
// accountID. It returns the provider and the file's path.
func MemberOIDC(t *testing.T, dir, accountID string) (*mockoidc.MockOIDC, string) {
	t.Helper()
	oidc, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = oidc.Shutdown() })
	members := filepath.Join(dir, "members.json")
	if err := os.WriteFile(members, []byte(`[{"account_id":"`+accountID+`","issuer":"`+oidc.Issuer()+`","subject":"`+Member+`"}]`), 0o600); err != nil {
		t.Fatal(err)
	}
	return oidc, members
}

// BrowserPage is Page open in a headless Chromium through the proxy,
// signed in as Member; its WebSocket rides on her session cookie.
type BrowserPage struct {
	ctx context.Context
}

// OpenPage signs Member in through oidc on a fresh browser, opens
// previewURL + "/" and waits until the page's WebSocket has echoed. via
// names the proxy for failure messages.
func OpenPage(t *testing.T, oidc *mockoidc.MockOIDC, previewURL, via string) *BrowserPage {
	t.Helper()
	oidc.QueueUser(&mockoidc.MockUser{Subject: Member, Email: Member + "@example.com", EmailVerified: true})
	p := &BrowserPage{ctx: chromiumtest.New(t, 2*time.Minute)}
	if err := chromedp.Do(p.ctx, chromedp.Navigate(previewURL+"/"), chromedp.WaitVisible("#msg")); err != nil {
		t.Fatalf("%s's page through %s: %v", Member, via, err)
	}
	for deadline := time.Now().Add(20 * time.Second); p.State(t) != "open"; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the page's WebSocket: %q, want open", p.State(t))
		}
	}
	return p
}

// State is the page's window.wsState.
func (p *BrowserPage) State(t *testing.T) string {
	t.Helper()
	st, err := chromedp.Run(p.ctx, chromedp.Evaluate[string](`window.wsState`))
	if err != nil {
		t.Fatalf("read the page's WebSocket state: %v", err)
	}
	return st
}

// WantPolicyClose waits up to RevokeWithin from since for the page's
// WebSocket to be closed with 1008 (policy violation) and a reason.
func (p *BrowserPage) WantPolicyClose(t *testing.T, since time.Time, what string) {
	t.Helper()
	var st string
	for st = p.State(t); !strings.HasPrefix(st, "closed") && time.Since(since) < RevokeWithin; st = p.State(t) {
		time.Sleep(50 * time.Millisecond)
	}
	if !strings.HasPrefix(st, "closed 1008 ") {
		t.Fatalf("%s's WebSocket %v after %s: %q, want closed 1008 with a reason", Member, time.Since(since).Round(time.Millisecond), what, st)
	}
	t.Logf("%s: browser saw %q after %v", what, st, time.Since(since).Round(time.Millisecond))
}
