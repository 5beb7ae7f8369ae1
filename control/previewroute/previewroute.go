// Package previewroute answers the preview proxy's questions from
// control's store: where does a preview host lead, whose is an account
// token, and which accounts does a signed-in person belong to, for
// control's internal API. Like control/sshauth it does not import the
// edge; its refusals are declared for both sides in internal/edgeapi.
package previewroute

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Refusals the proxy maps to its responses.
var (
	ErrUnknownHost = edgeapi.ErrPreviewUnknownHost
	ErrEnded       = edgeapi.ErrPreviewSandboxEnded
	ErrBadToken    = edgeapi.ErrPreviewInvalidToken
)

// Route is where a preview host leads.
type Route struct {
	Label      string
	SandboxID  string
	AccountID  string
	Port       int
	PortLabel  string // the port's name ("web"), for the edge's pages
	Access     store.PortAccess
	HostPolicy store.HostPolicy
	// State is the sandbox's state, still sent for edges older than
	// Admission, which is what the edge decides on.
	State     store.State
	Admission lifecycle.Admission
	// Addr, User and HostKey reach the sandbox's sshd; empty unless the
	// sandbox has a running server.
	Addr    string
	User    string
	HostKey string
	// Workspace is the sandbox's workspace path (for the pooled target).
	Workspace string
	// ForwardAddr reaches the sandbox's TCP forwarder; empty unless the
	// sandbox has a running server and a forwarder.
	ForwardAddr string
}

// Reader is the subset of store.Reader the resolver uses.
type Reader interface {
	PreviewPortByLabel(ctx context.Context, label string) (store.PreviewPort, error)
	Sandbox(ctx context.Context, id string) (store.Sandbox, error)
	AccountByTokenHash(ctx context.Context, hash []byte, now time.Time) (store.Account, store.Token, error)
}

// Resolver reads routes and tokens from the store. Safe for concurrent use.
type Resolver struct {
	store Reader
	now   func() time.Time
}

// New returns a Resolver; now may be nil (time.Now).
func New(r Reader, now func() time.Time) *Resolver {
	if now == nil {
		now = time.Now
	}
	return &Resolver{store: r, now: now}
}

// Resolve maps a host label to its route. A sandbox that ended resolves
// to ErrEnded: its previews are gone, and whoever had one open is told
// so rather than that the address never led anywhere. A prober learns
// only that a label it already holds once existed: labels carry 100
// random bits. A label of another account still reads as unknown.
func (r *Resolver) Resolve(ctx context.Context, label string) (Route, error) {
	p, err := r.store.PreviewPortByLabel(ctx, label)
	if errors.Is(err, store.ErrNotFound) {
		return Route{}, ErrUnknownHost
	}
	if err != nil {
		return Route{}, fmt.Errorf("look up preview host %s: %w", label, err)
	}
	sb, err := r.store.Sandbox(ctx, p.SandboxID)
	if errors.Is(err, store.ErrNotFound) {
		return Route{}, ErrUnknownHost
	}
	if err != nil {
		return Route{}, fmt.Errorf("look up sandbox %s: %w", p.SandboxID, err)
	}
	admission := lifecycle.AdmissionOf(sb)
	if sb.AccountID != p.AccountID {
		return Route{}, ErrUnknownHost
	}
	if admission == lifecycle.Ended {
		return Route{}, ErrEnded
	}
	rt := Route{
		Label: p.Label, SandboxID: sb.ID, AccountID: sb.AccountID, Port: p.Port, PortLabel: p.Name,
		Access: p.Access, HostPolicy: p.HostPolicy, State: sb.State, Admission: admission, Workspace: sb.Workspace,
	}
	if admission == lifecycle.Ready {
		rt.Addr, rt.User, rt.HostKey, rt.ForwardAddr = sb.Endpoint, sb.SSHUser, sb.HostKey, sb.ForwardEndpoint
	}
	return rt, nil
}

// TokenAccount returns the account an agent token belongs to. Project
// tokens are refused, as the REST API refuses them.
func (r *Resolver) TokenAccount(ctx context.Context, secret string) (string, error) {
	prefix, err := token.Parse(secret)
	if err != nil || prefix != token.PrefixAgent {
		return "", ErrBadToken
	}
	acct, tok, err := r.store.AccountByTokenHash(ctx, token.Hash(secret), r.now())
	if errors.Is(err, store.ErrNotFound) {
		return "", ErrBadToken
	}
	if err != nil {
		return "", fmt.Errorf("look up token: %w", err)
	}
	if tok.Kind != store.TokenAgent {
		return "", ErrBadToken
	}
	return acct.ID, nil
}
