package internalapi

import (
	"context"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

type fakeEgress struct{}

func (fakeEgress) EgressPolicy(_ context.Context, id, secret string) (*egresspolicy.Policy, error) {
	if id != "sbx-1" || secret != "sbx_px_good" {
		return nil, lifecycle.ErrProxyCredential
	}
	return egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"GitHub.com", "*.npmjs.org:443"}}), nil
}

func TestEgressAuthorize(t *testing.T) {
	ts := newTestServer(t, Deps{Egress: fakeEgress{}})
	auth := "Bearer " + testSecret
	resp, body := do(t, ts, "POST", edgeapi.PathEgressAuthorize, auth, `{"sandbox_id":"sbx-1","secret":"sbx_px_good"}`)
	if want := `{"network":{"egress":"allowlist","allow":["github.com","*.npmjs.org:443"]}}` + "\n"; resp.StatusCode != 200 || string(body) != want {
		t.Fatalf("egress authorize: %d %s, want 200 %s", resp.StatusCode, body, want)
	}
	resp, body = do(t, ts, "POST", edgeapi.PathEgressAuthorize, auth, `{"sandbox_id":"sbx-1","secret":"sbx_px_bad"}`)
	wantProblem(t, resp, body, 403, edgeapi.CodeEgressUnauthorized)
	resp, body = do(t, ts, "POST", edgeapi.PathEgressAuthorize, auth, `{"sandbox_id":"sbx-1"}`)
	wantProblem(t, resp, body, 400, edgeapi.CodeInvalidRequest)
	resp, body = do(t, ts, "POST", edgeapi.PathEgressAuthorize, "", `{"sandbox_id":"sbx-1","secret":"sbx_px_good"}`)
	wantProblem(t, resp, body, 401, edgeapi.CodeUnauthorized)
}
