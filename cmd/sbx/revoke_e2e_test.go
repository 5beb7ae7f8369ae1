package main

import (
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// TestDevPreviewRevokesConnections is issue 11 §2 through the real `sbx
// dev` (signing in through a real OIDC provider, members from a file):
// WebSockets are closed with 1008 within 5 s of `sbx admin token revoke`,
// of the member's removal from the members file, of the port's removal
// and of the sandbox's deletion, each leaving the other connections open.
func TestDevPreviewRevokesConnections(t *testing.T) {
	dir := t.TempDir()
	oidc, members := wstest.MemberOIDC(t, dir, devseed.AccountID)
	p := startDev(t, filepath.Join(dir, "data"), "", "--oidc-issuer", oidc.Issuer(), "--oidc-client-id", oidc.ClientID,
		"--oidc-client-secret", oidc.ClientSecret, "--preview-members", members)
	id := createReady(t, p)
	appA, appB := wstest.App(t), wstest.App(t)
	expose := func(port int) string {
		t.Helper()
		var pv portView
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port}, &pv); code != 201 {
			t.Fatalf("POST ports %d: %d", port, code)
		}
		return pv.URL
	}
	urlA, urlB := expose(appA), expose(appB)
	u, _ := url.Parse(urlA)
	proxy := "127.0.0.1:" + u.Port()
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	secret := p.admin("token", "mint", "--account", devseed.AccountID, "--name", "revoke me")
	_, tok, err := openStore(t, p.DataDir, "").AccountByTokenHash(t.Context(), token.Hash(secret), time.Now())
	if err != nil {
		t.Fatalf("the minted token: %v", err)
	}
	byRevoked := wstest.Dial(t, proxy, urlA, bearer(secret))
	byPortB := wstest.Dial(t, proxy, urlB, bearer(p.Token))
	bySandbox := wstest.Dial(t, proxy, urlA, bearer(p.Token))

	page := wstest.OpenPage(t, oidc, urlA, "sbx dev")

	t.Run("token revoked", func(t *testing.T) {
		start := time.Now()
		p.admin("token", "revoke", tok.ID)
		wstest.WantPolicyClose(t, byRevoked, start, "sbx admin token revoke")
		wstest.Echo(t, bySandbox, "the account's other token still works")
	})
	t.Run("member removed", func(t *testing.T) {
		start := time.Now()
		if err := os.WriteFile(members, []byte(`[]`), 0o600); err != nil {
			t.Fatal(err)
		}
		page.WantPolicyClose(t, start, "member removed")
		wstest.Echo(t, bySandbox, "token connections are not members'")
	})
	t.Run("port removed", func(t *testing.T) {
		start := time.Now()
		if code := p.call("DELETE", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(appB), nil, nil); code != 204 {
			t.Fatalf("DELETE port: %d", code)
		}
		wstest.WantPolicyClose(t, byPortB, start, "port removed")
		wstest.Echo(t, bySandbox, "the sandbox's other port still works")
	})
	t.Run("sandbox deleted", func(t *testing.T) {
		start := time.Now()
		if code := p.call("DELETE", "/api/v1/sandboxes/"+id, nil, nil); code >= 300 {
			t.Fatalf("DELETE sandbox: %d", code)
		}
		wstest.WantPolicyClose(t, bySandbox, start, "sandbox deleted")
	})
}
