// Package previewtls gives the preview proxy its certificates with
// certmagic. Two modes: a wildcard certificate for *.<domain> over DNS-01
// when a DNS provider is configured, or per-host on-demand issuance over
// HTTP-01, gated by the proxy ("is this a live preview host?") so strangers
// cannot make us order certificates for random names. Certificates, ACME
// accounts, challenge tokens and locks live in a shared certmagic.Storage,
// so any number of replicas issue each certificate once and all serve it.
package previewtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/caddyserver/certmagic"
	"github.com/libdns/libdns"
	"go.uber.org/zap"
)

// DNSProvider is what DNS-01 needs of a DNS host (a libdns provider).
type DNSProvider interface {
	libdns.RecordAppender
	libdns.RecordDeleter
}

// Config configures certificate management.
type Config struct {
	// Domain is the preview base domain; certificates cover <Domain> and
	// its one-label subdomains.
	Domain string
	// Storage is shared by every replica (certstore.Redis in production).
	Storage certmagic.Storage
	// CA is the ACME directory URL (Let's Encrypt's by default).
	CA    string
	Email string
	// TrustedRoots, when set, verifies the ACME server (tests use Pebble).
	TrustedRoots *x509.CertPool
	// Allow decides whether a host may have a certificate ordered on
	// demand; it must answer from control's routes, never from the
	// request alone.
	Allow func(ctx context.Context, name string) error
	// DNS, when set, switches to one wildcard certificate over DNS-01,
	// obtained at Start; no on-demand issuance then.
	DNS DNSProvider
	// DNSResolvers ("host:port") are asked for the challenge TXT record
	// before the CA is told to look, and for the zone's SOA. Empty: the
	// system's resolvers find the zone and its authoritative servers are
	// asked directly.
	DNSResolvers []string
	// HTTPPort is the public port HTTP-01 validation reaches (80 in
	// production); the challenge handler must be served there.
	HTTPPort int
	Logger   *slog.Logger
}

// Manager serves and renews certificates. Close stops its maintenance
// goroutines.
type Manager struct {
	cfg    Config
	cm     *certmagic.Config
	cache  *certmagic.Cache
	issuer *certmagic.ACMEIssuer
}

// New builds a Manager; Start obtains the wildcard certificate in DNS mode.
func New(c Config) (*Manager, error) {
	if c.Domain == "" || c.Storage == nil {
		return nil, errors.New("previewtls: Domain and Storage are required")
	}
	if c.DNS == nil && c.Allow == nil {
		return nil, errors.New("previewtls: on-demand issuance needs an Allow gate")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{cfg: c}
	m.cache = certmagic.NewCache(certmagic.CacheOptions{
		GetConfigForCert: func(certmagic.Certificate) (*certmagic.Config, error) { return m.cm, nil },
		Logger:           zap.NewNop(),
	})
	tmpl := certmagic.Config{
		Storage: c.Storage,
		Logger:  zap.NewNop(),
		// certmagic logs with zap; the events worth an operator's eye are
		// re-logged here with slog.
		OnEvent: func(ctx context.Context, event string, data map[string]any) error {
			switch event {
			case "cert_obtained", "cert_failed", "cert_ocsp_revoked":
				c.Logger.InfoContext(ctx, "certificate "+event, "identifier", data["identifier"], "renewal", data["renewal"])
			}
			return nil
		},
	}
	if c.DNS == nil {
		tmpl.OnDemand = &certmagic.OnDemandConfig{DecisionFunc: c.Allow}
	}
	m.cm = certmagic.New(m.cache, tmpl)
	issuer := certmagic.ACMEIssuer{
		CA: c.CA, Email: c.Email, Agreed: true, TrustedRoots: c.TrustedRoots,
		// One challenge type keeps the validation path obvious: HTTP-01
		// through our own HTTP listener, or DNS-01 for the wildcard.
		DisableTLSALPNChallenge: true,
		AltHTTPPort:             c.HTTPPort,
		Logger:                  zap.NewNop(),
	}
	if c.DNS != nil {
		issuer.DisableHTTPChallenge = true
		issuer.DNS01Solver = &certmagic.DNS01Solver{DNSManager: certmagic.DNSManager{DNSProvider: c.DNS, Resolvers: c.DNSResolvers}}
	}
	m.issuer = certmagic.NewACMEIssuer(m.cm, issuer)
	m.cm.Issuers = []certmagic.Issuer{m.issuer}
	return m, nil
}

// Start obtains (or loads from storage) the wildcard certificate in DNS
// mode; in on-demand mode there is nothing to do ahead of traffic.
func (m *Manager) Start(ctx context.Context) error {
	if m.cfg.DNS == nil {
		return nil
	}
	if err := m.cm.ManageSync(ctx, []string{"*." + m.cfg.Domain, m.cfg.Domain}); err != nil {
		return fmt.Errorf("previewtls: wildcard certificate for %s: %w", m.cfg.Domain, err)
	}
	return nil
}

// TLSConfig is for the HTTPS listener: certificates from the manager,
// HTTP/2 and HTTP/1.1 by ALPN.
func (m *Manager) TLSConfig() *tls.Config {
	tc := m.cm.TLSConfig()
	tc.NextProtos = []string{"h2", "http/1.1"}
	tc.MinVersion = tls.VersionTLS12
	return tc
}

// HTTPHandler answers ACME HTTP-01 challenges (including ones another
// replica started, from shared storage) and passes everything else on.
func (m *Manager) HTTPHandler(next http.Handler) http.Handler {
	return m.issuer.HTTPChallengeHandler(next)
}

// Close stops certificate maintenance.
func (m *Manager) Close() { m.cache.Stop() }
