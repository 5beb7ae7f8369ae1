package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

// previewResolver adapts control's previewroute to the proxy's Resolver.
// Like broker.go, it lives here so the edge never imports control.
type previewResolver struct{ r *previewroute.Resolver }

var _ preview.Resolver = previewResolver{}

func (a previewResolver) Resolve(ctx context.Context, label string) (preview.Route, error) {
	rt, err := a.r.Resolve(ctx, label)
	if errors.Is(err, previewroute.ErrUnknownHost) {
		return preview.Route{}, fmt.Errorf("%w (%w)", preview.ErrUnknownHost, err)
	}
	if err != nil {
		return preview.Route{}, err
	}
	out := preview.Route{
		SandboxID: rt.SandboxID, AccountID: rt.AccountID, Port: rt.Port,
		Public: rt.Access == store.AccessPublic, RewriteHost: rt.HostPolicy == store.HostLocalhost,
		Ready: rt.Addr != "",
	}
	if out.Ready {
		out.Target = podssh.Target{SandboxID: rt.SandboxID, Addr: rt.Addr, User: rt.User, HostKey: rt.HostKey, Workspace: rt.Workspace}
	}
	return out, nil
}

// previewAccounts adapts tokens (control's store) and memberships (the
// operator's file) to the proxy's Accounts.
type previewAccounts struct {
	r       *previewroute.Resolver
	members *previewroute.MembersFile
}

var _ preview.Accounts = previewAccounts{}

func (a previewAccounts) TokenAccount(ctx context.Context, secret string) (string, error) {
	acct, err := a.r.TokenAccount(ctx, secret)
	if errors.Is(err, previewroute.ErrBadToken) {
		return "", fmt.Errorf("%w (%w)", preview.ErrInvalidToken, err)
	}
	return acct, err
}

func (a previewAccounts) Member(_ context.Context, id preview.Identity, accountID string) (bool, error) {
	return a.members.Member(previewroute.Identity(id), accountID), nil
}

// previewInvalidator lets control tell a proxy built after it what
// changed: the in-process counterpart of the Redis invalidation channel.
// p is nil until the proxy exists.
type previewInvalidator struct{ p atomic.Pointer[preview.Proxy] }

func (v *previewInvalidator) changed(ctx context.Context, inv edgeapi.Invalidation) error {
	if p := v.p.Load(); p != nil {
		p.Revoke(context.WithoutCancel(ctx), inv)
	}
	return nil
}

// previewOptions are sbx dev's preview flags.
type previewOptions struct {
	domain       string
	issuer       string
	clientID     string
	clientSecret string
	membersFile  string
}

// devPreview is the preview proxy `sbx dev` runs next to control.
type devPreview struct {
	proxy *preview.Proxy
	pool  *podssh.Pool
	srv   *http.Server
	done  chan error // Serve's result; buffered so Serve never blocks on exit
	// stopMembers stops the members file watcher; membersDone is closed
	// when it has returned.
	stopMembers context.CancelFunc
	membersDone chan struct{}
}

// startPreview serves previews on ln over plain HTTP (and h2c). With no
// OIDC issuer it offers the dev sign-in for the dev account.
func startPreview(ctx context.Context, svc *control.Service, inv *previewInvalidator, ln net.Listener, dataDir string, o previewOptions, log *slog.Logger) (*devPreview, error) {
	key, err := loadOrCreateKey(filepath.Join(dataDir, "keys", "preview_session"))
	if err != nil {
		return nil, err
	}
	res := previewroute.New(svc.Store, nil)
	accts := previewAccounts{r: res}
	if o.membersFile != "" {
		if accts.members, err = previewroute.OpenMembersFile(o.membersFile); err != nil {
			return nil, err
		}
	}
	pool := podssh.NewPool(svc.CA, log, podssh.WithKeyID("edge-preview"))
	cfg := preview.DefaultConfig()
	cfg.Domain, cfg.Scheme, cfg.PublicPort = o.domain, "http", ln.Addr().(*net.TCPAddr).Port
	cfg.Resolver, cfg.Pods, cfg.Accounts = previewResolver{res}, pool, accts
	// Preview requests mark activity and wake suspended sandboxes through
	// control, like the SSH broker (see broker.go).
	cfg.Activity, cfg.Waker = svc.Activity, svc
	cfg.SessionKey = key
	cfg.Logger = log.With("component", "preview")
	cfg.Registry = svc.Registry
	if o.issuer != "" {
		cfg.OIDC = &preview.OIDCConfig{Issuer: o.issuer, ClientID: o.clientID, ClientSecret: o.clientSecret}
	} else {
		cfg.DevSignIn = &preview.DevSignIn{AccountID: devseed.AccountID, User: "dev"}
	}
	p, err := preview.New(ctx, cfg)
	if err != nil {
		pool.Close()
		return nil, err
	}
	inv.p.Store(p)
	d := &devPreview{proxy: p, pool: pool, srv: preview.NewServer(p, log, true), done: make(chan error, 1)}
	mctx, stop := context.WithCancel(context.Background())
	d.stopMembers, d.membersDone = stop, make(chan struct{})
	go func() {
		defer close(d.membersDone)
		if accts.members == nil {
			return
		}
		accts.members.Watch(mctx, previewroute.MembersWatchInterval, log, func() {
			p.Revoke(mctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateMembers})
		})
	}()
	go func() { d.done <- d.srv.Serve(ln) }()
	return d, nil
}

// shutdown stops accepting, lets requests finish until ctx ends, then
// closes upstream connections.
func (d *devPreview) shutdown(ctx context.Context) error {
	err := d.srv.Shutdown(ctx)
	if err != nil {
		_ = d.srv.Close()
	}
	if serr := <-d.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	d.stopMembers()
	<-d.membersDone
	d.proxy.Close()
	err = errors.Join(err, d.pool.Close())
	if err != nil {
		return fmt.Errorf("shutdown preview proxy: %w", err)
	}
	return nil
}

// loadOrCreateKey keeps the cookie-signing key across restarts, so a
// restart of sbx dev does not sign everyone out.
func loadOrCreateKey(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("preview session key: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("preview session key: %w", err)
	}
	return b, nil
}
