package controlclient

import (
	"context"
	"net/http"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

var (
	_ preview.Resolver = (*Client)(nil)
	_ preview.Accounts = (*Client)(nil)
)

// Resolve asks control where a preview host leads. It implements
// preview.Resolver; the proxy caches the answers.
func (c *Client) Resolve(ctx context.Context, label string) (preview.Route, error) {
	var out edgeapi.PreviewRoute
	if err := c.Do(ctx, http.MethodPost, edgeapi.PathPreviewRoute, edgeapi.PreviewRouteRequest{Label: label}, &out); err != nil {
		return preview.Route{}, err // a refusal is preview.ErrUnknownHost or preview.ErrHostEnded
	}
	rt := preview.Route{
		SandboxID: out.SandboxID, AccountID: out.AccountID, Port: out.Port, PortLabel: out.PortLabel,
		Public: out.Access == "public", RewriteHost: out.HostPolicy == "localhost", Ready: out.Addr != "", Admission: out.Admission,
	}
	if rt.Ready {
		rt.Target = podssh.Target{SandboxID: out.SandboxID, Addr: out.Addr, ForwardAddr: out.ForwardAddr, User: out.User,
			HostKey: out.HostKey, Workspace: out.Workspace}
	}
	return rt, nil
}

// TokenAccount says whose agent token secret is, from the token cache
// when it can (see Invalidate).
func (c *Client) TokenAccount(ctx context.Context, secret string) (string, error) {
	return c.tokens.account(ctx, secret)
}

// askTokenAccount asks control whose agent token secret is.
func (c *Client) askTokenAccount(ctx context.Context, secret string) (string, error) {
	var out edgeapi.PreviewTokenResponse
	if err := c.Do(ctx, http.MethodPost, edgeapi.PathPreviewToken, edgeapi.PreviewTokenRequest{Token: secret}, &out); err != nil {
		return "", err // a refusal is preview.ErrInvalidToken
	}
	return out.AccountID, nil
}

// Member asks control whether a signed-in identity belongs to accountID.
func (c *Client) Member(ctx context.Context, id preview.Identity, accountID string) (bool, error) {
	var out edgeapi.PreviewMemberResponse
	err := c.Do(ctx, http.MethodPost, edgeapi.PathPreviewMember, edgeapi.PreviewMemberRequest{
		AccountID: accountID, Issuer: id.Issuer, Subject: id.Subject, Email: id.Email, EmailVerified: id.EmailVerified,
	}, &out)
	if err != nil {
		return false, err
	}
	return out.Member, nil
}

var _ preview.Shares = (*Client)(nil)

// RedeemShare asks control to exchange a share link's secret.
func (c *Client) RedeemShare(ctx context.Context, label, secret string) (preview.Share, error) {
	return c.askShare(ctx, edgeapi.PreviewShareRequest{Label: label, Secret: secret})
}

// CheckShare asks control whether a redeemed share still opens label.
func (c *Client) CheckShare(ctx context.Context, label, id string) (preview.Share, error) {
	return c.askShare(ctx, edgeapi.PreviewShareRequest{Label: label, ShareID: id})
}

func (c *Client) askShare(ctx context.Context, req edgeapi.PreviewShareRequest) (preview.Share, error) {
	var out edgeapi.PreviewShare
	if err := c.Do(ctx, http.MethodPost, edgeapi.PathPreviewShare, req, &out); err != nil {
		return preview.Share{}, err // a refusal is one of preview.ErrShare*
	}
	return preview.Share{ID: out.ShareID, SandboxID: out.SandboxID, Port: out.Port, Expires: out.ExpiresAt}, nil
}
