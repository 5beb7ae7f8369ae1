package preview

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

// Pods is the subset of the pod connection pool the proxy uses: one
// pooled SSH connection per sandbox, carrying many direct-tcpip channels.
type Pods interface {
	Client(ctx context.Context, t podssh.Target) (*ssh.Client, error)
}

// Forwarders dials a sandbox's port through the port forwarder in the
// sandbox (package podtcp): plain TCP, no SSH channel. Its error wraps
// podtcp.ErrRefused when the forwarder answered that nothing listens.
type Forwarders interface {
	Dial(ctx context.Context, t podssh.Target, port int) (net.Conn, error)
}

// Identity is a signed-in person, as the OIDC provider vouched for them.
type Identity struct {
	Issuer        string
	Subject       string
	Email         string
	EmailVerified bool
}

// Accounts answers who may see a private preview.
type Accounts interface {
	// TokenAccount returns the account an agent token belongs to, or an
	// error wrapping ErrInvalidToken.
	TokenAccount(ctx context.Context, secret string) (accountID string, err error)
	// Member reports whether a signed-in identity belongs to accountID.
	Member(ctx context.Context, id Identity, accountID string) (bool, error)
}

// ErrInvalidToken is what Accounts.TokenAccount wraps for a token that is
// not a live agent token.
var ErrInvalidToken = edgeapi.ErrPreviewInvalidToken

// OIDCConfig configures browser sign-in.
type OIDCConfig struct {
	// Issuer is the provider's issuer URL (discovery is at
	// Issuer/.well-known/openid-configuration).
	Issuer       string
	ClientID     string
	ClientSecret string
	// Scopes beyond "openid"; default email and profile.
	Scopes []string
}

// DevSignIn replaces OIDC in `sbx dev`: the login page offers one button
// that signs in as the dev account's user. Never set in production.
type DevSignIn struct {
	AccountID string
	User      string
}

// Config configures the proxy. Zero durations and limits take the
// defaults set in DefaultConfig.
type Config struct {
	// Domain is the preview base domain ("preview.example.com"): ports are
	// served at <label>.<Domain>, login at <Domain> itself.
	Domain string
	// Scheme is "https" (production) or "http" (sbx dev); it is what
	// browsers see, and decides the URLs the proxy builds.
	Scheme string
	// PublicPort is the port browsers use, when not the scheme's default.
	PublicPort int

	Resolver Resolver
	Pods     Pods
	// Forwarders, when set, carries the traffic to a sandbox that has a
	// port forwarder (Route.Target.ForwardAddr); the others, and every
	// call to the sandbox's init, take Pods. Nil: everything takes Pods.
	Forwarders Forwarders
	Accounts   Accounts
	// Shares checks share links; nil: share links are refused.
	Shares   Shares
	Activity Activity // nil: none
	Waker    Waker    // nil: not-ready sandboxes get 503

	// OIDC is required unless DevSignIn is set.
	OIDC      *OIDCConfig
	DevSignIn *DevSignIn
	// SessionKey signs cookies and tickets; at least 32 bytes, the same on
	// every replica.
	SessionKey []byte
	// Tickets records redeemed login tickets; shared by every replica
	// (Redis, see redistickets). Nil: in this process only, which is
	// right for a single replica such as sbx dev.
	Tickets Tickets
	// SessionTTL is how long a preview cookie admits its holder.
	SessionTTL time.Duration

	// RouteTTL caches resolved routes; NegativeTTL unknown hosts and
	// sandboxes that are not ready.
	RouteTTL, NegativeTTL time.Duration
	// MaxRequestsPerHost bounds concurrent requests (and open WebSockets)
	// to one preview host, so one busy preview cannot take the edge; past
	// it the edge answers 503 preview_busy. The default, 2048, sits above
	// the 1,024 keep-alive connections one preview is measured at
	// (`loadtest preview --conns 1024`: one request each on HTTP/1.1,
	// and a request's slot goes back just after its answer, so the
	// client's next request on the same connection can briefly count
	// twice) and far under the edge's preview connection ceiling (8192),
	// so one preview still cannot hold them all.
	MaxRequestsPerHost int
	// MaxIdleUpstreamPerHost is how many idle upstream connections (each
	// a direct-tcpip channel) are kept per exposed port. Go's default of 2
	// would open and close a channel on almost every request under load.
	MaxIdleUpstreamPerHost int
	// WakeTimeout bounds how long a request waits for a suspended sandbox.
	WakeTimeout time.Duration
	// RecheckInterval is how often every open connection's authority is
	// checked again with control, the backstop for an invalidation that
	// was lost (Redis down or reconnecting when control published it).
	RecheckInterval time.Duration
	// Connections records browser sessions in the connection log; nil
	// records nothing. SessionIdle is how long a session lasts without a
	// request before its record ends (default 60 s).
	Connections *connlog.Recorder
	SessionIdle time.Duration

	// DisableLeanRelay sends every request through httputil.ReverseProxy,
	// not only WebSockets, HTTP/2 and streamed or large request bodies
	// (see relay.go). For comparing the two paths and as a way back.
	DisableLeanRelay bool

	Logger   *slog.Logger
	Registry prometheus.Registerer
	Now      func() time.Time
}

// DefaultConfig returns a Config with every default set; callers fill in
// the domain, collaborators and secrets.
func DefaultConfig() Config {
	return Config{
		Scheme:                 "https",
		SessionTTL:             12 * time.Hour,
		RouteTTL:               5 * time.Second,
		NegativeTTL:            time.Second,
		MaxRequestsPerHost:     2048,
		MaxIdleUpstreamPerHost: 64,
		WakeTimeout:            60 * time.Second,
		RecheckInterval:        30 * time.Second,
		SessionIdle:            time.Minute,
	}
}

// Validate checks the configuration without side effects.
func (c *Config) Validate() error {
	switch {
	case c.Domain == "" || c.Domain != strings.ToLower(c.Domain) || strings.Contains(c.Domain, ":"):
		return fmt.Errorf("preview: Domain %q must be a lowercase host name without port", c.Domain)
	case c.Scheme != "http" && c.Scheme != "https":
		return fmt.Errorf("preview: Scheme %q: want http or https", c.Scheme)
	case c.Resolver == nil:
		return errors.New("preview: Resolver is required")
	case c.Pods == nil:
		return errors.New("preview: Pods is required")
	case c.Accounts == nil:
		return errors.New("preview: Accounts is required")
	case len(c.SessionKey) < 32:
		return errors.New("preview: SessionKey must be at least 32 bytes")
	case c.OIDC == nil && c.DevSignIn == nil:
		return errors.New("preview: OIDC is required (an issuer, client id and secret); the dev sign-in is for sbx dev only")
	case c.OIDC != nil && c.DevSignIn != nil:
		// With both, /dev-login would sign anyone in as the dev user
		// past the real provider (the login state is in the redirect).
		return errors.New("preview: OIDC and DevSignIn are exclusive; the dev sign-in is for sbx dev without an issuer only")
	case c.OIDC != nil && (c.OIDC.Issuer == "" || c.OIDC.ClientID == ""):
		return errors.New("preview: OIDC.Issuer and OIDC.ClientID are required")
	case c.RouteTTL <= 0 || c.NegativeTTL <= 0 || c.SessionTTL <= 0 || c.WakeTimeout <= 0 || c.RecheckInterval <= 0 || c.SessionIdle <= 0:
		return errors.New("preview: RouteTTL, NegativeTTL, SessionTTL, WakeTimeout, RecheckInterval and SessionIdle must be positive")
	case c.MaxRequestsPerHost <= 0 || c.MaxIdleUpstreamPerHost <= 0:
		return errors.New("preview: MaxRequestsPerHost and MaxIdleUpstreamPerHost must be positive")
	}
	return nil
}
