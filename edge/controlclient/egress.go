package controlclient

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sbxedge/sbx/edge/egress"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

var _ egress.Sandboxes = (*Client)(nil)

// EgressPolicy asks control whether secret is the sandbox's proxy
// credential and what its egress may reach. It implements
// egress.Sandboxes; a refusal is egress.ErrUnauthorized. The gateway's
// cache (egress.Cache) keeps the answers briefly.
func (c *Client) EgressPolicy(ctx context.Context, sandboxID, secret string) (*egresspolicy.Policy, error) {
	var out edgeapi.EgressAuthorizeResponse
	err := c.Do(ctx, http.MethodPost, edgeapi.PathEgressAuthorize,
		edgeapi.EgressAuthorizeRequest{SandboxID: sandboxID, Secret: secret}, &out)
	if err != nil {
		return nil, err
	}
	p, err := egresspolicy.Parse(out.Network)
	if err != nil {
		return nil, fmt.Errorf("control's egress policy for %s: %w", sandboxID, err)
	}
	return p, nil
}

// SendEgressLog hands a batch of the gateway's decisions to control.
func (c *Client) SendEgressLog(ctx context.Context, ds []egress.Decision) error {
	req := edgeapi.EgressLogRequest{Decisions: make([]edgeapi.EgressDecision, len(ds))}
	for i, d := range ds {
		req.Decisions[i] = edgeapi.EgressDecision{
			Time: d.Time, SandboxID: d.SandboxID, Host: d.Host, Port: d.Port, Addr: d.Addr,
			Verdict: string(d.Verdict), Reason: d.Reason, BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		}
	}
	var out edgeapi.EgressLogResponse
	return c.Do(ctx, http.MethodPost, edgeapi.PathEgressLog, req, &out)
}

var _ egress.CredentialRoutes = (*Client)(nil)

// CredentialRoute asks control for a sandbox's credential route. It
// implements egress.CredentialRoutes; a refusal is egress.ErrUnauthorized.
func (c *Client) CredentialRoute(ctx context.Context, sandboxID, secret, name string) (egress.Route, error) {
	var out edgeapi.EgressCredentialResponse
	err := c.Do(ctx, http.MethodPost, edgeapi.PathEgressCredential,
		edgeapi.EgressCredentialRequest{SandboxID: sandboxID, Secret: secret, Name: name}, &out)
	if err != nil {
		return egress.Route{}, err
	}
	return egress.Route{Upstream: out.Upstream, Header: out.Header, Value: out.Value}, nil
}
