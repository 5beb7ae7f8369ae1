package internalapi

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
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

// EgressLog keeps the gateway's decisions; *lifecycle.Manager satisfies
// it.
type EgressLog interface {
	RecordEgress(ctx context.Context, ds []store.EgressDecision) (int, error)
}

var _ EgressLog = (*lifecycle.Manager)(nil)

// egressLog takes a batch of the gateway's decisions.
func (s *Server) egressLog(ctx context.Context, req edgeapi.EgressLogRequest) (edgeapi.EgressLogResponse, error) {
	if len(req.Decisions) > edgeapi.MaxEgressBatch {
		return edgeapi.EgressLogResponse{}, badRequest(fmt.Sprintf("at most %d decisions a batch", edgeapi.MaxEgressBatch))
	}
	ds := make([]store.EgressDecision, 0, len(req.Decisions))
	for _, d := range req.Decisions {
		switch d.Verdict {
		case "allowed", "denied", "failed":
		default:
			return edgeapi.EgressLogResponse{}, badRequest(fmt.Sprintf("verdict %q: want allowed, denied or failed", d.Verdict))
		}
		ds = append(ds, store.EgressDecision{
			SandboxID: d.SandboxID, At: d.Time, Host: d.Host, Port: int(d.Port), Addr: d.Addr,
			Verdict: d.Verdict, Reason: d.Reason, BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		})
	}
	kept, err := s.deps.EgressLog.RecordEgress(ctx, ds)
	if err != nil {
		return edgeapi.EgressLogResponse{}, err
	}
	return edgeapi.EgressLogResponse{Kept: kept}, nil
}

// CredentialRoutes opens a sandbox's credential routes;
// *lifecycle.Manager satisfies it.
type CredentialRoutes interface {
	CredentialRoute(ctx context.Context, sandboxID, proxySecret, name string) (lifecycle.CredentialRoute, error)
}

var _ CredentialRoutes = (*lifecycle.Manager)(nil)

// egressCredential answers the gateway's "may this sandbox use this
// route, and with what?".
func (s *Server) egressCredential(ctx context.Context, req edgeapi.EgressCredentialRequest) (edgeapi.EgressCredentialResponse, error) {
	if req.SandboxID == "" || req.Secret == "" || req.Name == "" {
		return edgeapi.EgressCredentialResponse{}, badRequest("sandbox_id, secret and name are required")
	}
	r, err := s.deps.Credentials.CredentialRoute(ctx, req.SandboxID, req.Secret, req.Name)
	if errors.Is(err, lifecycle.ErrProxyCredential) || errors.Is(err, lifecycle.ErrCredentialRoute) {
		return edgeapi.EgressCredentialResponse{}, edgeapi.ErrEgressUnauthorized
	}
	if err != nil {
		return edgeapi.EgressCredentialResponse{}, err
	}
	return edgeapi.EgressCredentialResponse{Upstream: r.Upstream, Header: r.Header, Value: r.Secret}, nil
}
