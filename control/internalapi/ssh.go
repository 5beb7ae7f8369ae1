package internalapi

import (
	"context"

	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// SSHAuthorizer is what the SSH authorize endpoint needs; *sshauth.Authorizer
// satisfies it.
type SSHAuthorizer interface {
	Authorize(ctx context.Context, username, fingerprint string) (sshauth.Route, error)
}

var _ SSHAuthorizer = (*sshauth.Authorizer)(nil)

// sshAuthorize answers the broker's "may this key reach this sandbox?".
// Refusals leave as problems with an ssh_* code (see refusals).
func (s *Server) sshAuthorize(ctx context.Context, req edgeapi.SSHAuthorizeRequest) (edgeapi.SSHAuthorizeResponse, error) {
	if req.Username == "" || req.Fingerprint == "" {
		return edgeapi.SSHAuthorizeResponse{}, badRequest("username and fingerprint are required")
	}
	r, err := s.deps.SSHAuth.Authorize(ctx, req.Username, req.Fingerprint)
	if err != nil {
		return edgeapi.SSHAuthorizeResponse{}, err
	}
	return edgeapi.SSHAuthorizeResponse{
		SandboxID: r.SandboxID, Addr: r.Addr, User: r.User, HostKey: r.HostKey, ExpiresAt: r.ExpiresAt,
	}, nil
}
