package controlclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sbxedge/sbx/edge/egress"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// TestEgressPolicy: an answer becomes a parsed policy, control's refusal
// is the gateway's ErrUnauthorized, and a policy control should never
// send is an error rather than a guess.
func TestEgressPolicy(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+edgeapi.PathEgressAuthorize, func(w http.ResponseWriter, r *http.Request) {
		var req edgeapi.EgressAuthorizeRequest
		_ = json.NewDecoder(r.Body).Decode(&req)
		switch req.Secret {
		case "good":
			_, _ = w.Write([]byte(`{"network":{"egress":"allowlist","allow":["github.com"]}}`))
		case "broken":
			_, _ = w.Write([]byte(`{"network":{"egress":"allowlist","allow":["*.com"]}}`))
		default:
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(`{"status":403,"code":"egress_unauthorized","detail":"proxy credential not valid"}`))
		}
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	c, err := New(Config{BaseURL: ts.URL, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p, err := c.EgressPolicy(ctx, "sbx-1", "good")
	if err != nil || p.Mode() != "allowlist" || len(p.Entries()) != 1 || p.Entries()[0] != "github.com" {
		t.Fatalf("EgressPolicy(good) = %v, %v", p, err)
	}
	if _, err := c.EgressPolicy(ctx, "sbx-1", "bad"); !errors.Is(err, egress.ErrUnauthorized) {
		t.Errorf("EgressPolicy(bad) error %v, want egress.ErrUnauthorized", err)
	}
	if _, err := c.EgressPolicy(ctx, "sbx-1", "broken"); err == nil || errors.Is(err, egress.ErrUnauthorized) {
		t.Errorf("EgressPolicy(broken) error %v, want a fault", err)
	}
}
