package internalapi

import (
	"context"
	"errors"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// EgressAuthorizer checks proxy credentials; *lifecycle.Manager satisfies
// it.
type EgressAuthorizer interface {
	EgressPolicy(ctx context.Context, sandboxID, secret string) (*egresspolicy.Policy, error)
}

var _ EgressAuthorizer = (*lifecycle.Manager)(nil)

// egressAuthorize answers the egress gateway's "whose credential is this
// and what may it reach?".
func (s *Server) egressAuthorize(ctx context.Context, req edgeapi.EgressAuthorizeRequest) (edgeapi.EgressAuthorizeResponse, error) {
	if req.SandboxID == "" || req.Secret == "" {
		return edgeapi.EgressAuthorizeResponse{}, badRequest("sandbox_id and secret are required")
	}
	p, err := s.deps.Egress.EgressPolicy(ctx, req.SandboxID, req.Secret)
	if errors.Is(err, lifecycle.ErrProxyCredential) {
		return edgeapi.EgressAuthorizeResponse{}, edgeapi.ErrEgressUnauthorized
	}
	if err != nil {
		return edgeapi.EgressAuthorizeResponse{}, err
	}
	return edgeapi.EgressAuthorizeResponse{Network: p.Spec()}, nil
}
