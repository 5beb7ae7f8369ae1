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
