package internalapi

import (
	"context"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// PreviewRoutes is what the preview endpoints need;
// *previewroute.Resolver satisfies it.
type PreviewRoutes interface {
	Resolve(ctx context.Context, label string) (previewroute.Route, error)
	TokenAccount(ctx context.Context, secret string) (string, error)
}

var _ PreviewRoutes = (*previewroute.Resolver)(nil)

// Members answers membership; *previewroute.MembersFile (reloaded as the
// operator edits it) and *previewroute.Members satisfy it.
type Members interface {
	Member(id previewroute.Identity, accountID string) bool
}

var (
	_ Members = (*previewroute.MembersFile)(nil)
	_ Members = (*previewroute.Members)(nil)
)

func (s *Server) previewRoute(ctx context.Context, req edgeapi.PreviewRouteRequest) (edgeapi.PreviewRoute, error) {
	if req.Label == "" {
		return edgeapi.PreviewRoute{}, badRequest("label is required")
	}
	r, err := s.deps.Preview.Resolve(ctx, req.Label)
	if err != nil {
		return edgeapi.PreviewRoute{}, err
	}
	out := edgeapi.PreviewRoute{
		SandboxID: r.SandboxID, AccountID: r.AccountID, Port: r.Port, PortLabel: r.PortLabel, Access: string(r.Access),
		HostPolicy: string(r.HostPolicy), State: string(r.State), Admission: wireAdmission(r.Admission), Addr: r.Addr, User: r.User,
		HostKey: r.HostKey, Workspace: r.Workspace,
	}
	if r.Addr != "" {
		// The edge takes a route without Addr for a sleeping sandbox; a
		// forwarder address beside none would be one it must not use.
		out.ForwardAddr = r.ForwardAddr
	}
	return out, nil
}

// wireAdmission is lifecycle's answer in the seam's words. Ended has
// none: an ended sandbox's route is a refusal, never a route. Nor has the
// zero value (a Resolver that did not answer), which leaves the field out
// as an older control would.
func wireAdmission(a lifecycle.Admission) edgeapi.Admission {
	switch a {
	case lifecycle.Ready:
		return edgeapi.AdmissionReady
	case lifecycle.Starting:
		return edgeapi.AdmissionStarting
	case lifecycle.Wakeable:
		return edgeapi.AdmissionWakeable
	}
	return ""
}

func (s *Server) previewToken(ctx context.Context, req edgeapi.PreviewTokenRequest) (edgeapi.PreviewTokenResponse, error) {
	acct, err := s.deps.Preview.TokenAccount(ctx, req.Token)
	if err != nil {
		return edgeapi.PreviewTokenResponse{}, err
	}
	return edgeapi.PreviewTokenResponse{AccountID: acct}, nil
}

// previewMember answers from the operator's members file; with none
// configured nobody is a member.
func (s *Server) previewMember(_ context.Context, req edgeapi.PreviewMemberRequest) (edgeapi.PreviewMemberResponse, error) {
	id := previewroute.Identity{Issuer: req.Issuer, Subject: req.Subject, Email: req.Email, EmailVerified: req.EmailVerified}
	if s.deps.PreviewMembers == nil {
		return edgeapi.PreviewMemberResponse{}, nil
	}
	return edgeapi.PreviewMemberResponse{Member: s.deps.PreviewMembers.Member(id, req.AccountID)}, nil
}

// Shares answers for share links; *lifecycle.Manager satisfies it.
type Shares interface {
	RedeemShare(ctx context.Context, label, secret string) (store.Share, error)
	CheckShare(ctx context.Context, label, shareID string) (store.Share, error)
}

var _ Shares = (*lifecycle.Manager)(nil)

// previewShare redeems a share link's secret (its first use in a
// browser) or checks a redeemed one by ID.
func (s *Server) previewShare(ctx context.Context, req edgeapi.PreviewShareRequest) (edgeapi.PreviewShare, error) {
	var sh store.Share
	var err error
	switch {
	case req.Label == "":
		return edgeapi.PreviewShare{}, badRequest("label is required")
	case req.Secret != "":
		sh, err = s.deps.Shares.RedeemShare(ctx, req.Label, req.Secret)
	case req.ShareID != "":
		sh, err = s.deps.Shares.CheckShare(ctx, req.Label, req.ShareID)
	default:
		return edgeapi.PreviewShare{}, badRequest("secret or share_id is required")
	}
	if err != nil {
		return edgeapi.PreviewShare{}, err
	}
	return edgeapi.PreviewShare{ShareID: sh.ID, SandboxID: sh.SandboxID, Port: sh.Port, ExpiresAt: sh.ExpiresAt}, nil
}
