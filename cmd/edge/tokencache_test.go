package main

import (
	"context"
	"net"
	"net/http"
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

// TestPreviewCachedTokenRevoked: the edge caches which account a token
// belongs to, so a private preview's requests do not each ask control.
// A token the cache holds and control then revokes is refused on the very
// next request once the revocation's invalidation reached the edge (its
// WebSocket closing shows when), not after the cache's TTL.
func TestPreviewCachedTokenRevoked(t *testing.T) {
	ps := startPreviewStack(t)
	s := ps.stack
	proxy := "127.0.0.1:" + strconv.Itoa(ps.previewPort)
	id := s.readySandbox(t)
	var pv struct{ URL string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": wstest.App(t)}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	secret, hash := token.New(token.PrefixAgent)
	if err := s.svc.Store.InTx(t.Context(), func(tx store.Tx) error {
		return tx.InsertToken(t.Context(), store.Token{ID: "tok-cached", AccountID: devseed.AccountID, Kind: store.TokenAgent,
			Name: "cached", Hash: hash, CreatedAt: time.Now().UTC()})
	}); err != nil {
		t.Fatal(err)
	}
	d := &net.Dialer{}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
		return d.DialContext(ctx, network, proxy)
	}}}
	t.Cleanup(hc.CloseIdleConnections)
	get := func(tok string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, pv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for range 3 { // the first asks control, the others are answered by the cache
		if code := get(secret); code != http.StatusOK {
			t.Fatalf("GET with the token before revoking: %d, want 200", code)
		}
	}
	ws := wstest.Dial(t, proxy, pv.URL, http.Header{"Authorization": {"Bearer " + secret}})

	// Revoked as `sbx admin token revoke` does it: control/accounts writes
	// and publishes on Redis (control's poll of the store is a 30 s
	// safety net beside Redis, so the close within 5 s is the published
	// road).
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	defer rdb.Close()
	publish := func(ctx context.Context, inv edgeapi.Invalidation) error { return invalidation.Publish(ctx, rdb, inv) }
	start := time.Now()
	if err := accounts.New(s.svc.Store, publish, time.Now).RevokeToken(t.Context(), "tok-cached"); err != nil {
		t.Fatal(err)
	}
	wstest.WantPolicyClose(t, ws, start, "token revoked")
	if code := get(secret); code != http.StatusForbidden && code != http.StatusUnauthorized {
		t.Fatalf("GET with the revoked token once its invalidation arrived: %d, want 401 or 403", code)
	}
	if code := get(s.token); code != http.StatusOK {
		t.Fatalf("GET with the account's other token: %d, want 200", code)
	}
}
