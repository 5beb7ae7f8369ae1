package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/certstore"
	"github.com/sbxedge/sbx/edge/controlclient"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/edge/preview/previewtls"
	"github.com/sbxedge/sbx/edge/preview/previewtls/rfc2136"
	"github.com/sbxedge/sbx/edge/preview/redistickets"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/podssh"
)

// PreviewConfig is the preview proxy's part of the edge's configuration.
type PreviewConfig struct {
	// Addr serves previews: HTTPS (":443") or, with PlainHTTP, HTTP and
	// h2c for TLS terminated in front. Empty disables previews.
	// SBX_PREVIEW_ADDR.
	Addr string
	// PlainHTTP serves Addr without TLS. SBX_PREVIEW_PLAIN_HTTP=1.
	PlainHTTP bool
	// HTTPAddr answers ACME HTTP-01 challenges and redirects the rest to
	// HTTPS (":80"). SBX_PREVIEW_HTTP_ADDR.
	HTTPAddr string
	// Domain is the preview base domain; it should be its own registrable
	// domain (see README). SBX_PREVIEW_DOMAIN.
	Domain string
	// PublicPort is the port browsers use when not the scheme's default.
	PublicPort int
	// OIDC sign-in for private previews: required, there is no dev
	// sign-in in production. SBX_OIDC_ISSUER, SBX_OIDC_CLIENT_ID, and the
	// secret from SBX_OIDC_CLIENT_SECRET_FILE or SBX_OIDC_CLIENT_SECRET.
	OIDCIssuer, OIDCClientID, OIDCClientSecret string
	oidcSecretFile                             string
	// SessionKey signs preview cookies; the same on every replica, read
	// from SBX_PREVIEW_SESSION_KEY_FILE.
	SessionKey     []byte
	sessionKeyFile string
	// RedisURL holds certificates, ACME locks and redeemed login tickets
	// shared by replicas.
	// SBX_REDIS_URL.
	RedisURL string
	// RouteTTL is how long a resolved route is cached; with Redis,
	// control's invalidations make removals immediate regardless.
	// SBX_PREVIEW_ROUTE_TTL.
	RouteTTL time.Duration
	// ACMECA is the ACME directory (default Let's Encrypt); ACMEEmail the
	// account contact. SBX_ACME_CA, SBX_ACME_EMAIL.
	ACMECA, ACMEEmail string
	// DNS01 gets one wildcard certificate over DNS-01 with RFC 2136
	// updates to this primary server instead of per-host on-demand
	// HTTP-01 certificates. SBX_ACME_DNS_SERVER, SBX_ACME_DNS_TSIG_KEY,
	// SBX_ACME_DNS_TSIG_ALGORITHM and the base64 TSIG secret from
	// SBX_ACME_DNS_TSIG_SECRET_FILE or SBX_ACME_DNS_TSIG_SECRET.
	DNS01          rfc2136.Provider
	tsigSecretFile string
}

func previewFlags(fs *flag.FlagSet, c *PreviewConfig, env func(k, def string) string) {
	fs.StringVar(&c.Addr, "preview-addr", env("SBX_PREVIEW_ADDR", ""), "preview proxy listen address (empty: previews off)")
	fs.BoolVar(&c.PlainHTTP, "preview-plain-http", env("SBX_PREVIEW_PLAIN_HTTP", "") == "1", "serve previews over plain HTTP/h2c (TLS terminated in front)")
	fs.StringVar(&c.HTTPAddr, "preview-http-addr", env("SBX_PREVIEW_HTTP_ADDR", ":80"), "ACME HTTP-01 and redirect-to-HTTPS listener (TLS mode)")
	fs.StringVar(&c.Domain, "preview-domain", env("SBX_PREVIEW_DOMAIN", ""), "preview base domain")
	fs.IntVar(&c.PublicPort, "preview-public-port", 0, "port browsers use, when not the scheme's default")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", env("SBX_OIDC_ISSUER", ""), "OIDC issuer URL for preview sign-in")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", env("SBX_OIDC_CLIENT_ID", ""), "OIDC client id")
	fs.StringVar(&c.oidcSecretFile, "oidc-client-secret-file", env("SBX_OIDC_CLIENT_SECRET_FILE", ""), "file holding the OIDC client secret (default: $SBX_OIDC_CLIENT_SECRET)")
	fs.StringVar(&c.sessionKeyFile, "preview-session-key-file", env("SBX_PREVIEW_SESSION_KEY_FILE", ""), "file holding the cookie-signing key (at least 32 bytes), shared by replicas")
	fs.StringVar(&c.RedisURL, "redis-url", env("SBX_REDIS_URL", ""), "Redis for certificates, ACME locks and login tickets shared by replicas (required in TLS mode)")
	fs.DurationVar(&c.RouteTTL, "preview-route-ttl", 5*time.Second, "how long resolved preview routes are cached")
	fs.StringVar(&c.ACMECA, "acme-ca", env("SBX_ACME_CA", ""), "ACME directory URL (default: Let's Encrypt)")
	fs.StringVar(&c.ACMEEmail, "acme-email", env("SBX_ACME_EMAIL", ""), "ACME account contact")
	fs.StringVar(&c.DNS01.Server, "acme-dns-server", env("SBX_ACME_DNS_SERVER", ""), "DNS primary (host:port) taking RFC 2136 updates: one wildcard certificate over DNS-01 instead of on-demand HTTP-01")
	fs.StringVar(&c.DNS01.KeyName, "acme-dns-tsig-key", env("SBX_ACME_DNS_TSIG_KEY", ""), "TSIG key name for --acme-dns-server")
	fs.StringVar(&c.DNS01.KeyAlgorithm, "acme-dns-tsig-algorithm", env("SBX_ACME_DNS_TSIG_ALGORITHM", "hmac-sha256"), "TSIG algorithm: hmac-sha256, hmac-sha384 or hmac-sha512")
	fs.StringVar(&c.tsigSecretFile, "acme-dns-tsig-secret-file", env("SBX_ACME_DNS_TSIG_SECRET_FILE", ""), "file holding the base64 TSIG secret (default: $SBX_ACME_DNS_TSIG_SECRET)")
}

func (c *PreviewConfig) readSecrets(getenv func(string) string) error {
	if c.Addr == "" {
		return nil
	}
	c.OIDCClientSecret = getenv("SBX_OIDC_CLIENT_SECRET")
	if c.oidcSecretFile != "" {
		b, err := os.ReadFile(c.oidcSecretFile)
		if err != nil {
			return fmt.Errorf("--oidc-client-secret-file: %w", err)
		}
		c.OIDCClientSecret = strings.TrimSpace(string(b))
	}
	c.DNS01.Secret = getenv("SBX_ACME_DNS_TSIG_SECRET")
	if c.tsigSecretFile != "" {
		b, err := os.ReadFile(c.tsigSecretFile)
		if err != nil {
			return fmt.Errorf("--acme-dns-tsig-secret-file: %w", err)
		}
		c.DNS01.Secret = strings.TrimSpace(string(b))
	}
	if c.sessionKeyFile != "" {
		b, err := os.ReadFile(c.sessionKeyFile)
		if err != nil {
			return fmt.Errorf("--preview-session-key-file: %w", err)
		}
		c.SessionKey = []byte(strings.TrimSpace(string(b)))
	}
	return nil
}

// validate refuses a preview proxy without a real OIDC issuer: the dev
// sign-in exists only in sbx dev.
func (c *PreviewConfig) validate() error {
	if c.Addr == "" {
		return nil
	}
	var errs []error
	if c.Domain == "" {
		errs = append(errs, errors.New("--preview-domain (SBX_PREVIEW_DOMAIN) is required with --preview-addr"))
	}
	if c.OIDCIssuer == "" || c.OIDCClientID == "" {
		errs = append(errs, errors.New("--oidc-issuer and --oidc-client-id are required with --preview-addr: private previews need a real identity provider"))
	}
	if len(c.SessionKey) < 32 {
		errs = append(errs, errors.New("--preview-session-key-file must hold at least 32 bytes"))
	}
	if !c.PlainHTTP && c.RedisURL == "" {
		errs = append(errs, errors.New("--redis-url is required for TLS: certificates and ACME locks are shared by replicas"))
	}
	if c.DNS01.Server != "" {
		if c.PlainHTTP {
			errs = append(errs, errors.New("--acme-dns-server needs TLS: it makes no sense with --preview-plain-http"))
		}
		if err := c.DNS01.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("--acme-dns-server: %w (--acme-dns-tsig-key, --acme-dns-tsig-secret-file)", err))
		}
	}
	return errors.Join(errs...)
}

// previewServer is the running proxy and its listeners.
type previewServer struct {
	proxy   *preview.Proxy
	pool    *podssh.Pool
	tls     *previewtls.Manager
	rdb     *redis.Client
	certs   *certstore.Redis
	servers []*http.Server
	done    chan error // one result per server; buffered
	addr    net.Addr

	stopSub context.CancelFunc // stops the invalidation subscriber
	subDone chan struct{}
}

func startPreview(ctx context.Context, c PreviewConfig, cc *controlclient.Client, act *redisstore.Store, ca *sshca.CA, reg *prometheus.Registry, log *slog.Logger) (_ *previewServer, err error) {
	ps := &previewServer{pool: podssh.NewPool(ca, log, podssh.WithKeyID("edge-preview")), done: make(chan error, 2)}
	defer func() {
		if err != nil {
			ps.close()
		}
	}()
	ln, err := net.Listen("tcp", c.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen for previews on %s: %w", c.Addr, err)
	}
	ps.addr = ln.Addr()
	cfg := preview.DefaultConfig()
	cfg.Domain, cfg.PublicPort = c.Domain, c.PublicPort
	if c.PlainHTTP {
		cfg.Scheme = "http"
	}
	cfg.Resolver, cfg.Accounts, cfg.Pods = cc, cc, ps.pool
	// Requests wake suspended sandboxes through control and count as
	// activity in the Redis control's idle detector reads.
	cfg.Waker = cc
	if act != nil {
		cfg.Activity = act
	}
	cfg.OIDC = &preview.OIDCConfig{Issuer: c.OIDCIssuer, ClientID: c.OIDCClientID, ClientSecret: c.OIDCClientSecret}
	cfg.SessionKey = c.SessionKey
	cfg.Logger = log.With("component", "preview")
	cfg.Registry = reg
	if c.RouteTTL > 0 {
		cfg.RouteTTL = c.RouteTTL
	}
	if c.RedisURL != "" {
		opt, err := redis.ParseURL(c.RedisURL)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("--redis-url: %w", err)
		}
		ps.rdb = redis.NewClient(opt)
		// A login ticket is good once across all replicas.
		cfg.Tickets = redistickets.New(ps.rdb, "sbx:preview-tickets:")
	} else {
		log.Warn("no --redis-url: preview login tickets are single-use per replica only; run one replica or give them a Redis")
	}
	if ps.proxy, err = preview.New(ctx, cfg); err != nil {
		ln.Close()
		return nil, err
	}
	if ps.rdb != nil {
		ps.subscribe(log)
	}
	// servers lists only started servers: close waits for each one's
	// result.
	main := preview.NewServer(ps.proxy, log, c.PlainHTTP)
	if c.PlainHTTP {
		ps.servers = append(ps.servers, main)
		go func() { ps.done <- main.Serve(ln) }()
		return ps, nil
	}
	ps.certs = certstore.New(ps.rdb, "sbx:certs:")
	tc := previewtls.Config{
		Domain: c.Domain, Storage: ps.certs, CA: c.ACMECA, Email: c.ACMEEmail,
		Allow: ps.proxy.AllowCertificate, Logger: log.With("component", "previewtls"),
	}
	if c.DNS01.Server != "" {
		tc.DNS = &c.DNS01
	}
	if ps.tls, err = previewtls.New(tc); err != nil {
		ln.Close()
		return nil, err
	}
	// DNS-01: the wildcard is obtained (or loaded from the shared
	// storage) before serving, so no handshake waits for an order.
	if err = ps.tls.Start(ctx); err != nil {
		ln.Close()
		return nil, err
	}
	main.TLSConfig = ps.tls.TLSConfig()
	ps.servers = append(ps.servers, main)
	go func() { ps.done <- main.ServeTLS(ln, "", "") }()
	// Port 80: ACME HTTP-01 challenges (any replica's, from the shared
	// storage), everything else redirected to HTTPS.
	hln, err := net.Listen("tcp", c.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for ACME HTTP-01 on %s: %w", c.HTTPAddr, err)
	}
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
	// Challenge requests are tiny; nothing here streams.
	hs := &http.Server{Handler: ps.tls.HTTPHandler(redirect), ReadHeaderTimeout: 10 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	ps.servers = append(ps.servers, hs)
	go func() { ps.done <- hs.Serve(hln) }()
	return ps, nil
}

// shutdown stops accepting and lets requests finish until ctx ends.
func (ps *previewServer) shutdown(ctx context.Context) error {
	var errs []error
	for _, s := range ps.servers {
		if err := s.Shutdown(ctx); err != nil {
			_ = s.Close()
			errs = append(errs, err)
		}
	}
	for range ps.servers {
		if err := <-ps.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	ps.servers = nil
	ps.close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("shutdown preview proxy: %w", err)
	}
	return nil
}

// subscribe applies control's invalidations as they are published: the
// proxy drops what it cached and ends the connections no longer admitted
// (preview.Proxy.Revoke). The subscription is re-established by go-redis
// after a disconnect; messages lost meanwhile are covered by the route
// TTL and the proxy's periodic re-check of open connections.
func (ps *previewServer) subscribe(log *slog.Logger) {
	ctx, cancel := context.WithCancel(context.Background())
	ps.stopSub, ps.subDone = cancel, make(chan struct{})
	sub := ps.rdb.Subscribe(ctx, edgeapi.PreviewInvalidateChannel)
	// Wait for the subscription before serving, so an invalidation
	// published right after start is not missed. (Receive must not run
	// concurrently with Channel, hence first.)
	if _, err := sub.Receive(ctx); err != nil {
		log.Warn("subscribe to preview invalidations", "err", err)
	}
	go func() {
		defer close(ps.subDone)
		defer sub.Close()
		ch := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				inv, err := edgeapi.ParseInvalidation(m.Payload)
				if err != nil {
					log.Warn("preview invalidation dropped", "err", err)
					continue
				}
				// Bounded, so a hung control cannot stall the
				// invalidations behind this one for long.
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				ps.proxy.Revoke(rctx, inv)
				cancel()
				log.Debug("preview invalidation applied", "kind", inv.Kind, "label", inv.Label, "sandbox_id", inv.SandboxID, "account_id", inv.AccountID)
			}
		}
	}()
}

func (ps *previewServer) close() {
	if ps.stopSub != nil {
		ps.stopSub()
		<-ps.subDone
		ps.stopSub = nil
	}
	for _, s := range ps.servers {
		_ = s.Close()
		<-ps.done
	}
	if ps.proxy != nil {
		ps.proxy.Close()
	}
	if ps.tls != nil {
		ps.tls.Close()
	}
	if ps.certs != nil {
		ps.certs.Close()
	}
	if ps.rdb != nil {
		_ = ps.rdb.Close()
	}
	_ = ps.pool.Close()
}
