package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/edge/certstore"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/edge/preview/previewtls"
	"github.com/sbxedge/sbx/edge/preview/previewtls/rfc2136"
	"github.com/sbxedge/sbx/edge/preview/redistickets"
	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/netlimit"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
)

// PreviewConfig is the preview proxy's part of the edge's configuration.
type PreviewConfig struct {
	// Addr serves previews: HTTPS (":443") or, with PlainHTTP, HTTP and
	// h2c for TLS terminated in front. Listener, when set, is used
	// instead. Both empty: previews are off.
	Addr     string
	Listener net.Listener
	// PlainHTTP serves without TLS.
	PlainHTTP bool
	// HTTPAddr answers ACME HTTP-01 challenges and redirects the rest to
	// HTTPS (":80"); TLS mode only.
	HTTPAddr string
	// Domain is the preview base domain; it should be its own registrable
	// domain (see README).
	Domain string
	// PublicPort is the port browsers use when not the scheme's default.
	PublicPort int
	// OIDC signs people in for private previews; DevSignIn replaces it in
	// sbx dev only. Exactly one is set.
	OIDC      *preview.OIDCConfig
	DevSignIn *preview.DevSignIn
	// SessionKey signs preview cookies; the same on every replica.
	SessionKey []byte
	// RouteTTL is how long a resolved route is cached; with Redis,
	// control's invalidations make removals immediate regardless.
	RouteTTL time.Duration
	// SessionIdle ends a browser session's connection log record after
	// this long without a request; zero: preview's default (60 s).
	SessionIdle time.Duration
	// ACMECA is the ACME directory (default Let's Encrypt); ACMEEmail the
	// account contact.
	ACMECA, ACMEEmail string
	// DNS01, when set, gets one wildcard certificate over DNS-01 with
	// RFC 2136 updates instead of per-host on-demand HTTP-01 ones.
	DNS01 *rfc2136.Provider
	// ReverseProxyOnly sends every request through httputil.ReverseProxy
	// instead of the lean HTTP/1.1 relay: a way back should the relay
	// misbehave with some application, without a new build.
	ReverseProxyOnly bool
	// SSHOnly takes every preview connection over SSH (direct-tcpip
	// channels), also to sandboxes with a port forwarder, whose road
	// is plain TCP inside the cluster: for a network that must not
	// carry preview traffic unencrypted.
	SSHOnly bool
	// MaxConns is the most connections the preview listener holds at
	// once (0: DefaultPreviewMaxConns); BodyTimeout bounds a request
	// body before the proxy has authorised its sender, and its stalls
	// after (httplimit.BodyDeadline; 0: httplimit.DefaultBodyTimeout).
	MaxConns    int
	BodyTimeout time.Duration
}

func (c *PreviewConfig) enabled() bool { return c.Addr != "" || c.Listener != nil }

// validate checks what preview.Config.Validate cannot: the listeners and
// what TLS needs.
func (c *PreviewConfig) validate(haveRedis bool) error {
	if !c.enabled() {
		return nil
	}
	var errs []error
	if c.Domain == "" {
		errs = append(errs, errors.New("edge: Preview.Domain is required"))
	}
	if c.OIDC == nil && c.DevSignIn == nil {
		errs = append(errs, errors.New("edge: Preview.OIDC is required: private previews need a real identity provider"))
	}
	if len(c.SessionKey) < 32 {
		errs = append(errs, errors.New("edge: Preview.SessionKey must hold at least 32 bytes"))
	}
	if !c.PlainHTTP && !haveRedis {
		errs = append(errs, errors.New("edge: a Redis URL is required for TLS: certificates and ACME locks are shared by replicas"))
	}
	if c.DNS01 != nil {
		if c.PlainHTTP {
			errs = append(errs, errors.New("edge: DNS-01 needs TLS: it makes no sense with plain HTTP"))
		}
		if err := c.DNS01.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("edge: DNS-01: %w", err))
		}
	}
	return errors.Join(errs...)
}

// previewServer is the proxy and what it owns.
type previewServer struct {
	cfg   PreviewConfig
	proxy *preview.Proxy
	pool  *podssh.Pool
	tls   *previewtls.Manager // nil with PlainHTTP
	certs *certstore.Redis    // nil with PlainHTTP
	ln    net.Listener
	// listen binds the ACME HTTP-01 listener (Edge.listen).
	listen func(ln net.Listener, addr, what string, maxConns int) (net.Listener, error)
}

// previewSSHConns is how many SSH connections the preview proxy keeps
// to each sandbox (see podssh.WithConnsPerSandbox). One: measured with
// loadtest preview --ssh-conns on 2 cores, 64 client connections, 2 or
// 4 connections gained nothing on a quiet machine (req/s 0.98x, p99
// 1.1x, sshd CPU per request +17%) and only under heavy outside load
// more req/s and a lower median, with a longer p99 every time. Worth
// measuring again on the edge's real hardware.
const previewSSHConns = 1

// openPreview builds the proxy on control's answers, with its own pooled
// SSH connections to sandboxes, and binds its listener.
func (e *Edge) openPreview(ctx context.Context) (_ *previewServer, err error) {
	c := e.cfg.Preview
	ps := &previewServer{cfg: c, pool: podssh.NewPool(e.cfg.CA, e.log, podssh.WithKeyID("edge-preview"),
		podssh.WithConnsPerSandbox(previewSSHConns)), listen: e.listen}
	defer func() {
		if err != nil {
			_ = ps.close()
		}
	}()
	cfg := preview.DefaultConfig()
	cfg.Domain, cfg.PublicPort = c.Domain, c.PublicPort
	if c.PlainHTTP {
		cfg.Scheme = "http"
	}
	cfg.Resolver, cfg.Accounts, cfg.Shares, cfg.Pods = e.cc, e.cc, e.cc, ps.pool
	if !c.SSHOnly {
		cfg.Forwarders = &podtcp.Dialer{CA: e.cfg.CA, KeyID: "edge-preview", Timeout: e.cfg.UpstreamTimeout}
	}
	// Requests wake suspended sandboxes through control and count as
	// activity where control's idle detector reads it.
	cfg.Waker = e.cc
	if e.act != nil {
		cfg.Activity = e.act
	}
	cfg.OIDC, cfg.DevSignIn = c.OIDC, c.DevSignIn
	cfg.SessionKey = c.SessionKey
	cfg.Logger = e.log.With("component", "preview")
	cfg.Registry = e.reg
	if c.RouteTTL > 0 {
		cfg.RouteTTL = c.RouteTTL
	}
	cfg.DisableLeanRelay = c.ReverseProxyOnly
	cfg.Connections = e.conns
	if c.SessionIdle > 0 {
		cfg.SessionIdle = c.SessionIdle
	}
	if e.rdb != nil {
		// A login ticket is good once across all replicas.
		cfg.Tickets = redistickets.New(e.rdb, "sbx:preview-tickets:")
	} else if e.cfg.Activity == nil {
		// An in-process activity store is sbx dev's: one replica, where
		// a ticket used once is used once everywhere.
		e.log.Warn("no Redis: preview login tickets are single-use per replica only; run one replica or give them a Redis")
	}
	if ps.proxy, err = preview.New(ctx, cfg); err != nil {
		return nil, err
	}
	if !c.PlainHTTP {
		ps.certs = certstore.New(e.rdb, "sbx:certs:")
		tc := previewtls.Config{
			Domain: c.Domain, Storage: ps.certs, CA: c.ACMECA, Email: c.ACMEEmail,
			Allow: ps.proxy.AllowCertificate, Logger: e.log.With("component", "previewtls"),
		}
		if c.DNS01 != nil { // not a typed nil in the interface
			tc.DNS = c.DNS01
		}
		if ps.tls, err = previewtls.New(tc); err != nil {
			return nil, err
		}
	}
	if ps.ln, err = e.listen(c.Listener, c.Addr, "previews", cmp.Or(c.MaxConns, DefaultPreviewMaxConns)); err != nil {
		return nil, err
	}
	return ps, nil
}

// listen is ln when the caller handed one in, else a new TCP listener on
// addr for what, with a ceiling of maxConns connections and temporary
// accept errors (out of descriptors) survived (netlimit).
func (e *Edge) listen(ln net.Listener, addr, what string, maxConns int) (net.Listener, error) {
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", addr); err != nil {
			return nil, fmt.Errorf("listen for %s on %s: %w", what, addr, err)
		}
	}
	return e.limits.Wrap(ln, netlimit.Config{Name: what, MaxConns: maxConns, Logger: e.log}), nil
}

// start serves previews (and, with TLS, ACME HTTP-01 on HTTPAddr).
func (ps *previewServer) start(ctx context.Context, log *slog.Logger, serve func(*server)) error {
	main := preview.NewServerWith(ps.proxy, log, ps.cfg.PlainHTTP, httplimit.BodyDeadline{Timeout: ps.cfg.BodyTimeout})
	s := &server{name: "previews", ln: ps.ln, serve: main.Serve, closed: http.ErrServerClosed, shutdown: main.Shutdown, close: main.Close}
	if ps.cfg.PlainHTTP {
		serve(s)
		return nil
	}
	// DNS-01: the wildcard is obtained (or loaded from the shared
	// storage) before serving, so no handshake waits for an order.
	if err := ps.tls.Start(ctx); err != nil {
		return err
	}
	tlsConfig := ps.tls.TLSConfig()
	s.serve = func(ln net.Listener) error { return main.ServeTLS(ln, tlsConfig) }
	// Port 80: ACME HTTP-01 challenges (any replica's, from the shared
	// storage), everything else redirected to HTTPS.
	hln, err := ps.listen(nil, ps.cfg.HTTPAddr, "ACME HTTP-01", smallMaxConns)
	if err != nil {
		return err
	}
	serve(s)
	redirect := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	})
	// Challenge requests are tiny and have no body; nothing here streams.
	hs := &http.Server{Handler: ps.tls.HTTPHandler(redirect), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: 20 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: time.Minute, MaxHeaderBytes: 16 << 10}
	serve(&server{name: "ACME HTTP-01", ln: hln, serve: hs.Serve, closed: http.ErrServerClosed, shutdown: hs.Shutdown, close: hs.Close})
	return nil
}

// close releases what the servers used; they are stopped by then.
func (ps *previewServer) close() error {
	if ps.ln != nil {
		_ = ps.ln.Close()
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
	return ps.pool.Close()
}
