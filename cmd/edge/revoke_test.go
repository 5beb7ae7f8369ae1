package main

import (
	"context"
	"net/http"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/accounts"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/invalidation"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// TestPreviewRevokesConnections is issue 11 §2 in the split deployment:
// WebSockets open through cmd/edge are closed with 1008 within 5 s of
// their authority ending in control, each by the invalidation control
// publishes on Redis: a token revoked as `sbx admin token revoke` does it
// (control/accounts, publishing on Redis as it writes; control's poll of
// the store is then a 30 s safety net, so the close within 5 s is the
// published road), the member removed from the operator's members
// file, the port unexposed, the sandbox suspended, the sandbox deleted.
// Each cause closes its own connection and leaves the others open.
func TestPreviewRevokesConnections(t *testing.T) {
	ps := startPreviewStack(t)
	s := ps.stack
	proxy := "127.0.0.1:" + strconv.Itoa(ps.previewPort)
	id, other := s.readySandbox(t), s.readySandbox(t)
	appA, appB := wstest.App(t), wstest.App(t)
	expose := func(sb string, port int) string {
		t.Helper()
		var pv struct{ URL string }
		if code := s.call(t, "POST", "/api/v1/sandboxes/"+sb+"/ports", map[string]any{"port": port}, &pv); code != 201 {
			t.Fatalf("POST ports %d on %s: %d", port, sb, code)
		}
		return pv.URL
	}
	urlA, urlB, urlOther := expose(id, appA), expose(id, appB), expose(other, appA)
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }

	// A second token of the account, to revoke.
	secret, hash := token.New(token.PrefixAgent)
	if err := s.svc.Store.InTx(t.Context(), func(tx store.Tx) error {
		return tx.InsertToken(t.Context(), store.Token{ID: "tok-revoke-me", AccountID: devseed.AccountID, Kind: store.TokenAgent,
			Name: "revoke me", Hash: hash, CreatedAt: time.Now().UTC()})
	}); err != nil {
		t.Fatal(err)
	}
	byRevoked := wstest.Dial(t, proxy, urlA, bearer(secret))
	byPortB := wstest.Dial(t, proxy, urlB, bearer(s.token))
	byOther := wstest.Dial(t, proxy, urlOther, bearer(s.token))
	bySandbox := wstest.Dial(t, proxy, urlA, bearer(s.token))

	// alice signs in through the provider; the page's own WebSocket rides
	// on her cookie.
	page := wstest.OpenPage(t, ps.oidc, urlA, "cmd/edge")

	t.Run("token revoked", func(t *testing.T) {
		rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
		defer rdb.Close()
		publish := func(ctx context.Context, inv edgeapi.Invalidation) error { return invalidation.Publish(ctx, rdb, inv) }
		start := time.Now()
		if err := accounts.New(s.svc.Store, publish, time.Now).RevokeToken(t.Context(), "tok-revoke-me"); err != nil {
			t.Fatal(err)
		}
		wstest.WantPolicyClose(t, byRevoked, start, "token revoked")
		wstest.Echo(t, bySandbox, "the account's other token still works")
	})
	t.Run("member removed", func(t *testing.T) {
		start := time.Now()
		if err := os.WriteFile(ps.members, []byte(`[]`), 0o600); err != nil {
			t.Fatal(err)
		}
		page.WantPolicyClose(t, start, "member removed")
		wstest.Echo(t, bySandbox, "token connections are not members'")
	})
	t.Run("port removed", func(t *testing.T) {
		start := time.Now()
		if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(appB), nil, nil); code != 204 {
			t.Fatalf("DELETE port: %d", code)
		}
		wstest.WantPolicyClose(t, byPortB, start, "port removed")
		wstest.Echo(t, bySandbox, "the sandbox's other port still works")
	})
	t.Run("sandbox suspended", func(t *testing.T) {
		start := time.Now()
		if err := s.svc.Life.Suspend(t.Context(), other, "test"); err != nil {
			t.Fatal(err)
		}
		wstest.WantPolicyClose(t, byOther, start, "sandbox suspended")
		wstest.Echo(t, bySandbox, "another sandbox still works")
	})
	t.Run("sandbox deleted", func(t *testing.T) {
		start := time.Now()
		if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id, nil, nil); code != 202 && code != 200 && code != 204 {
			t.Fatalf("DELETE sandbox: %d", code)
		}
		wstest.WantPolicyClose(t, bySandbox, start, "sandbox deleted")
	})
}
