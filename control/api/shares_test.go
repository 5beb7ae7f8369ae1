package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

func TestShares(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			testShares(t, backend)
		})
	}
}

func testShares(t *testing.T, backend string) {
	var mu sync.Mutex // guards published
	var published []edgeapi.Invalidation
	e := newEnv(t, backend, true, func(c *control.Config) {
		c.PreviewChanged = func(_ context.Context, inv edgeapi.Invalidation) error {
			mu.Lock()
			defer mu.Unlock()
			published = append(published, inv)
			return nil
		}
	})
	sb := e.createDev()
	ports := "/api/v1/sandboxes/" + sb.ID + "/ports"
	shares := ports + "/3000/shares"
	post := func(tok, path, body string) (int, []byte) {
		t.Helper()
		code, _, b := e.do(tok, "POST", path, strings.NewReader(body), "Content-Type", "application/json")
		return code, b
	}

	// Port labels: shown back, unique per sandbox, DNS-label shaped; an
	// unknown visibility is refused naming the valid ones.
	if code, b := post("dev", ports, `{"port":3000,"label":"web"}`); code != 201 || !strings.Contains(string(b), `"label":"web"`) {
		t.Fatalf("expose with label: %d %s", code, b)
	}
	for _, tc := range []struct{ name, body, field, detail string }{
		{"label taken", `{"port":3001,"label":"web"}`, "label", "already names port 3000"},
		{"label shape", `{"port":3001,"label":"Web_App"}`, "label", "DNS label"},
		{"visibility", `{"port":3001,"access":"account"}`, "access", `must be \"private\" or \"public\"`},
	} {
		code, b := post("dev", ports, tc.body)
		if code != 422 || !strings.Contains(string(b), tc.field) || !strings.Contains(string(b), tc.detail) {
			t.Errorf("%s: %d %s, want 422 naming %s: %s", tc.name, code, b, tc.field, tc.detail)
		}
	}
	_, _, b := e.do("dev", "GET", ports, nil)
	if !strings.Contains(string(b), `"label":"web"`) {
		t.Errorf("GET ports: %s, want the label", b)
	}

	for _, tc := range []struct{ name, body string }{
		{"missing", `{}`},
		{"zero", `{"expires_in_minutes":0}`},
		{"past a week", `{"expires_in_minutes":10081}`},
		{"long note", `{"expires_in_minutes":5,"note":"` + strings.Repeat("n", 201) + `"}`},
	} {
		if code, b := post("dev", shares, tc.body); code != 422 || !strings.Contains(string(b), "expires_in_minutes") && !strings.Contains(string(b), "note") {
			t.Errorf("share %s: %d %s, want 422 naming the field", tc.name, code, b)
		}
	}
	if code, b := post("dev", ports+"/4000/shares", `{"expires_in_minutes":5}`); code != 404 || !strings.Contains(string(b), "port_not_found") {
		t.Errorf("share of a port not exposed: %d %s, want 404 port_not_found", code, b)
	}
	if code, b := post("other", shares, `{"expires_in_minutes":5}`); code != 404 || !strings.Contains(string(b), "sandbox_not_found") {
		t.Errorf("share of another account's sandbox: %d %s, want 404", code, b)
	}

	code, b := post("dev", shares, `{"expires_in_minutes":120,"note":"for design review"}`)
	var sh struct {
		ID, URL, Note, State string
	}
	if err := json.Unmarshal(b, &sh); code != 201 || err != nil {
		t.Fatalf("create share: %d %s", code, b)
	}
	u, err := url.Parse(sh.URL)
	secret := u.Query().Get("sbx_share")
	if err != nil || !strings.HasPrefix(secret, "sbx_sh_") || sh.Note != "for design review" || sh.State != "active" {
		t.Fatalf("created share %+v: want a URL with an sbx_sh_ secret, the note, active", sh)
	}
	stored, err := e.svc.Store.ShareByID(t.Context(), sh.ID)
	if err != nil || strings.Contains(string(stored.Hash), secret) || len(stored.Hash) != 32 {
		t.Errorf("stored share %+v, %v: want only the secret's SHA-256", stored, err)
	}

	code, _, b = e.do("dev", "GET", shares, nil)
	if code != 200 || !strings.Contains(string(b), sh.ID) || strings.Contains(string(b), secret) || strings.Contains(string(b), `"url"`) {
		t.Errorf("list shares: %d %s, want the share without its secret or URL", code, b)
	}
	if code, _, _ := e.do("other", "GET", shares, nil); code != 404 {
		t.Errorf("list another account's shares: %d, want 404", code)
	}
	if code, _, _ := e.do("other", "DELETE", shares+"/"+sh.ID, nil); code != 404 {
		t.Errorf("revoke another account's share: %d, want 404", code)
	}
	if code, _, _ := e.do("dev", "DELETE", shares+"/shr-nosuch", nil); code != 404 {
		t.Errorf("revoke unknown share: %d, want 404", code)
	}
	if code, _, _ := e.do("dev", "DELETE", ports+"/3001/shares/"+sh.ID, nil); code != 404 {
		t.Errorf("revoke a share under another port: %d, want 404", code)
	}
	label := strings.SplitN(u.Host, ".", 2)[0]
	for range 2 { // first use, then another visit
		if got, err := e.svc.Life.RedeemShare(t.Context(), label, secret); err != nil || got.ID != sh.ID {
			t.Fatalf("redeem: %+v, %v", got, err)
		}
	}
	if _, err := e.svc.Life.RedeemShare(t.Context(), label, "sbx_sh_"+strings.Repeat("A", 43)); !errors.Is(err, lifecycle.ErrShareUnknown) {
		t.Errorf("redeem of an unknown secret: %v, want ErrShareUnknown", err)
	}
	for range 2 { // idempotent
		if code, _, b := e.do("dev", "DELETE", shares+"/"+sh.ID, nil); code != 204 {
			t.Fatalf("revoke: %d %s", code, b)
		}
	}
	_, _, b = e.do("dev", "GET", shares, nil)
	if !strings.Contains(string(b), `"state":"revoked"`) {
		t.Errorf("list after revoke: %s, want state revoked", b)
	}
	mu.Lock()
	var told bool
	for _, inv := range published {
		told = told || (inv.Kind == edgeapi.InvalidateShare && inv.ShareID == sh.ID)
	}
	mu.Unlock()
	if !told {
		t.Errorf("published %+v, want a share invalidation for %s", published, sh.ID)
	}

	// Creation and revocation are audited with the token that asked;
	// first use (the edge's redemption) is audited once.
	if _, err := e.svc.Life.RedeemShare(t.Context(), label, secret); !errors.Is(err, lifecycle.ErrShareRevoked) {
		t.Errorf("redeem of a revoked share: %v, want ErrShareRevoked", err)
	}
	audit, err := e.svc.Store.Audit(t.Context(), store.AuditFilter{AccountID: devseed.AccountID, SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var actions []string
	for _, a := range audit {
		caller := a.Caller
		if strings.HasPrefix(caller, "tok-dev-") {
			caller = "tok-dev"
		}
		actions = append(actions, a.Action+" "+caller)
	}
	want := "share_revoke tok-dev,share_revoke tok-dev,share_first_use share:" + sh.ID + ",share_create tok-dev"
	if got := strings.Join(actions, ","); got != want {
		t.Errorf("audit: %q, want %q", got, want)
	}
}
