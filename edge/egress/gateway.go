// Package egress is the edge's egress gateway: an HTTP forward proxy
// (CONNECT for TLS and any TCP, absolute-form requests for plain HTTP)
// that code inside a sandbox goes through to reach the outside.
//
// Each request carries the sandbox's proxy credential (Proxy-Authorization
// Basic, the sandbox ID as user name). The gateway matches the requested
// host and port against the sandbox's policy, resolves the name itself,
// checks every address against the refused ranges, and dials exactly an
// address it checked, so a name that changes its answer between the
// check and the dial (DNS rebinding) cannot lead anywhere unchecked. A
// refusal is a 403 whose body and Sbx-Egress-Reason header say why in
// words. Every decision is counted by verdict and recorded per sandbox.
//
// It is written for this product rather than built on stripe/smokescreen:
// smokescreen's ACLs are static per role from a YAML file, its roles come
// from client certificates, it brings logrus, a forked goproxy, statsd
// and a CLI framework into the edge's dependency list, and it has no way
// to close a sandbox's open connections when its policy changes. The
// parts worth having from it (classify after resolution, dial the
// checked address) are a few dozen lines over net/netip here.
package egress

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/httplimit"
)

// ReasonHeader carries a refusal's reason in words, for tools that show
// headers but not bodies.
const ReasonHeader = "Sbx-Egress-Reason"

// ErrUnauthorized is what Sandboxes returns for a credential that is not
// valid now: unknown, malformed, of an ended sandbox, or expired. It is
// control's refusal itself, so an answer of the internal API matches it.
var ErrUnauthorized error = edgeapi.ErrEgressUnauthorized

// Sandboxes says whose a proxy credential is and what it may reach.
//
// The edge asks control (through the internal API, cached for a few
// seconds) rather than verifying credentials itself: the edge needs the
// sandbox's current policy from control anyway, a credential must stop
// working when its sandbox ends, and verifying locally would mean giving
// every edge replica the secret credentials are derived from.
type Sandboxes interface {
	// EgressPolicy returns the policy of sandboxID if secret is its
	// current proxy credential, or an error wrapping ErrUnauthorized.
	EgressPolicy(ctx context.Context, sandboxID, secret string) (*egresspolicy.Policy, error)
}

// Resolver is the subset of *net.Resolver the gateway uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens the upstream connection to an address the gateway has
// checked, always an IP address and port.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Config configures a Gateway. Sandboxes and Ranges are required.
type Config struct {
	Sandboxes Sandboxes
	Ranges    *egresspolicy.Ranges
	// Resolver defaults to net.DefaultResolver.
	Resolver Resolver
	// Dialer defaults to a net.Dialer with DialTimeout.
	Dialer Dialer
	// Credentials opens credential routes; nil serves none.
	Credentials CredentialRoutes
	// UpstreamRootCAs are the CAs a credential route's HTTPS upstream
	// must chain to; nil is the system's. An operator sets it for an
	// in-cluster upstream with a private CA; tests, for one on loopback.
	// The name verified is the upstream URL's host, not the address
	// dialed.
	UpstreamRootCAs *x509.CertPool
	// Log receives every decision; nil records none.
	Log Recorder
	// Metrics registers the gateway's collectors; nil registers none.
	Metrics prometheus.Registerer
	Logger  *slog.Logger
	Now     func() time.Time
	// ResolveTimeout and DialTimeout bound the two upstream steps
	// (default 5 s and 10 s): a sandbox must not hold a handler forever
	// with a name that never answers.
	ResolveTimeout, DialTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.Resolver == nil {
		c.Resolver = net.DefaultResolver
	}
	if c.DialTimeout <= 0 {
		c.DialTimeout = 10 * time.Second
	}
	if c.ResolveTimeout <= 0 {
		c.ResolveTimeout = 5 * time.Second
	}
	if c.Dialer == nil {
		c.Dialer = &net.Dialer{Timeout: c.DialTimeout}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Log == nil {
		c.Log = nopLog{}
	}
}

type nopLog struct{}

func (nopLog) Record(Decision) {}

// Gateway is the egress proxy, an http.Handler. Close ends its tunnels
// and waits for them.
type Gateway struct {
	cfg     Config
	metrics *metrics
	tunnels tunnels
	wg      sync.WaitGroup // relays in progress
}

// New builds a Gateway from cfg.
func New(cfg Config) (*Gateway, error) {
	if cfg.Sandboxes == nil {
		return nil, errors.New("egress: Config.Sandboxes is required")
	}
	if cfg.Ranges == nil {
		return nil, errors.New("egress: Config.Ranges is required")
	}
	cfg.setDefaults()
	m, err := newMetrics(cfg.Metrics)
	if err != nil {
		return nil, err
	}
	return &Gateway{cfg: cfg, metrics: m, tunnels: newTunnels()}, nil
}

// PolicyChanged applies a sandbox's new policy to its open connections:
// each one the policy no longer allows is closed now. New requests
// follow whatever Sandboxes answers.
func (g *Gateway) PolicyChanged(sandboxID string, p *egresspolicy.Policy) int {
	return g.tunnels.recheck(sandboxID, p)
}

// SandboxEnded closes every open connection of a sandbox.
func (g *Gateway) SandboxEnded(sandboxID string) {
	g.tunnels.end(sandboxID, errSandboxEnded)
}

// Recheck asks again about a sandbox control says has changed (ended,
// suspended, its policy edited) and applies the answer to its open
// connections: all closed when its credential no longer works, those
// the new policy refuses otherwise. A cached answer is dropped first.
// Without open connections there is nothing to ask about.
func (g *Gateway) Recheck(ctx context.Context, sandboxID string) {
	g.tunnels.changed(sandboxID)
	if f, ok := g.cfg.Sandboxes.(interface{ Forget(string) }); ok {
		f.Forget(sandboxID)
	}
	g.recheckOpen(ctx, sandboxID)
}

// recheckOpen asks about a sandbox with open tunnels and applies the
// answer to them. It records no change itself, so tunnels that raced a
// change and ask again do not set each other off.
func (g *Gateway) recheckOpen(ctx context.Context, sandboxID string) {
	secret := g.tunnels.credential(sandboxID)
	if secret == "" {
		return
	}
	p, err := g.cfg.Sandboxes.EgressPolicy(ctx, sandboxID, secret)
	switch {
	case errors.Is(err, ErrUnauthorized):
		g.SandboxEnded(sandboxID)
	case err != nil:
		// Kept open: control's silence is not a refusal. The next
		// invalidation or the sandbox's end settles it.
		g.cfg.Logger.Warn("egress: recheck sandbox", "sandbox_id", sandboxID, "err", err)
	default:
		g.PolicyChanged(sandboxID, p)
	}
}

// Shutdown waits for open relays to finish until ctx ends, then closes
// what is left; the http.Server in front is shut down first by the
// caller, so no relay starts meanwhile.
func (g *Gateway) Shutdown(ctx context.Context) error {
	done := make(chan struct{})
	go func() {
		g.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		g.Close()
		<-done
		return ctx.Err()
	}
}

// Close ends every open relay and waits for them. The http.Server in
// front is the caller's to shut down; hijacked CONNECT tunnels are not
// its to close, so they are this.
func (g *Gateway) Close() {
	g.tunnels.end("", errors.New("the egress gateway is shutting down"))
	g.wg.Wait()
	g.tunnels.reg.Close()
}

// request is one proxied request on its way through the steps.
type request struct {
	start     time.Time
	epoch     uint64 // of the tunnel registry, before the policy was read
	sandboxID string
	secret    string
	policy    *egresspolicy.Policy
	target    egresspolicy.Target
}

// ServeHTTP authenticates, decides, dials and relays.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if isCredentialRoute(r) {
		g.serveCredential(w, r)
		return
	}
	req := &request{start: g.cfg.Now(), epoch: g.tunnels.epoch()}
	sandboxID, secret, ok := proxyCredential(r)
	if !ok {
		g.unauthenticated(w, "this gateway needs the sandbox's proxy credential (Proxy-Authorization Basic, the sandbox ID and its secret)")
		return
	}
	policy, err := g.cfg.Sandboxes.EgressPolicy(r.Context(), sandboxID, secret)
	if errors.Is(err, ErrUnauthorized) {
		g.unauthenticated(w, "the proxy credential is not valid (wrong, or its sandbox has ended)")
		return
	}
	if err != nil {
		g.cfg.Logger.Warn("egress: check proxy credential", "sandbox_id", sandboxID, "err", err)
		g.metrics.decisions.WithLabelValues(string(Failed)).Inc()
		refuse(w, http.StatusServiceUnavailable, "the egress gateway cannot check the proxy credential right now; try again")
		return
	}
	req.sandboxID, req.secret, req.policy = sandboxID, secret, policy
	// An authenticated sandbox's upload may take as long as it moves.
	httplimit.Trust(r)

	target, err := requestTarget(r)
	if err != nil {
		g.decide(w, req, http.StatusBadRequest, Failed, err.Error())
		return
	}
	req.target = target
	if !policy.AllowsTarget(target) && (target.Name == "" || !policy.HasAddrEntries()) {
		// Refused by name alone: the name is not even resolved, so a
		// refused lookup leaks nothing to DNS.
		g.decide(w, req, http.StatusForbidden, Denied, policy.Refusal(target))
		return
	}
	addrs, status, verdict, reason := g.choose(r.Context(), req)
	if reason != "" {
		g.decide(w, req, status, verdict, reason)
		return
	}
	up, addr, err := g.dial(r.Context(), addrs, target.Port)
	if err != nil {
		g.decide(w, req, http.StatusBadGateway, Failed, fmt.Sprintf("cannot connect to %s: %v", target, err))
		return
	}
	if r.Method == http.MethodConnect {
		g.relayConnect(w, r, req, up, addr)
		return
	}
	g.relayHTTP(w, r, req, up, addr, func(pr *httputil.ProxyRequest) {
		pr.Out.URL = r.URL
		pr.Out.Host = r.Host
	})
}

// choose resolves the target and keeps the addresses the policy and the
// refused ranges allow, in the resolver's order. With none left it
// returns the status, verdict and words of the refusal.
func (g *Gateway) choose(ctx context.Context, req *request) ([]netip.Addr, int, Verdict, string) {
	t := req.target
	addrs := []netip.Addr{t.Addr}
	if t.Name != "" {
		ctx, cancel := context.WithTimeout(ctx, g.cfg.ResolveTimeout)
		defer cancel()
		var err error
		addrs, err = g.cfg.Resolver.LookupNetIP(ctx, "ip", t.Name)
		if err != nil || len(addrs) == 0 {
			return nil, http.StatusBadGateway, Failed, fmt.Sprintf("cannot resolve %s: %v", t.Name, err)
		}
	}
	var ok []netip.Addr
	var first string
	for _, a := range addrs {
		a = a.Unmap()
		why := ""
		if !req.policy.Allows(t, a) {
			why = req.policy.Refusal(t)
		} else if r := g.cfg.Ranges.Check(netip.AddrPortFrom(a, t.Port)); r != "" {
			why = r + "; the egress gateway never connects there"
			if t.Name != "" {
				why = t.Name + " resolves to " + why
			}
		}
		if why == "" {
			ok = append(ok, a)
		} else if first == "" {
			first = why
		}
	}
	if len(ok) == 0 {
		return nil, http.StatusForbidden, Denied, first
	}
	return ok, 0, "", ""
}

// dial tries each checked address in turn and returns the first
// connection; it never dials anything but these addresses.
func (g *Gateway) dial(ctx context.Context, addrs []netip.Addr, port uint16) (net.Conn, netip.Addr, error) {
	ctx, cancel := context.WithTimeout(ctx, g.cfg.DialTimeout)
	defer cancel()
	var errs []error
	for _, a := range addrs {
		c, err := g.cfg.Dialer.DialContext(ctx, "tcp", netip.AddrPortFrom(a, port).String())
		if err == nil {
			return c, a, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.Addr{}, errors.Join(errs...)
}

// requestTarget reads the destination of a proxy request: the authority
// of a CONNECT, the host of an absolute-form http:// request.
func requestTarget(r *http.Request) (egresspolicy.Target, error) {
	var hostport, defPort string
	switch {
	case r.Method == http.MethodConnect:
		hostport = r.Host
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		hostport, defPort = r.URL.Host, "80"
	case r.URL.IsAbs():
		return egresspolicy.Target{}, fmt.Errorf("scheme %q: send https through CONNECT (HTTPS_PROXY) and plain http in absolute form", r.URL.Scheme)
	default:
		return egresspolicy.Target{}, errors.New("not a proxy request: use CONNECT or an absolute http:// URL")
	}
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		if defPort == "" {
			return egresspolicy.Target{}, fmt.Errorf("CONNECT %q: want host:port", hostport)
		}
		host, port = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), defPort
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return egresspolicy.Target{}, fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return egresspolicy.ParseTarget(host, uint16(n))
}

// proxyCredential reads Proxy-Authorization: Basic base64(id:secret).
func proxyCredential(r *http.Request) (id, secret string, ok bool) {
	h := r.Header.Get("Proxy-Authorization")
	scheme, b64, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return "", "", false
	}
	raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(b64))
	if err != nil {
		return "", "", false
	}
	id, secret, ok = strings.Cut(string(raw), ":")
	if !ok || id == "" || secret == "" {
		return "", "", false
	}
	return id, secret, true
}

func (g *Gateway) unauthenticated(w http.ResponseWriter, reason string) {
	g.metrics.decisions.WithLabelValues(string(Unauthenticated)).Inc()
	w.Header().Set("Proxy-Authenticate", `Basic realm="sbx egress"`)
	refuse(w, http.StatusProxyAuthRequired, reason)
}

// decide answers a request that goes no further, counts and records it.
func (g *Gateway) decide(w http.ResponseWriter, req *request, status int, v Verdict, reason string) {
	g.metrics.decisions.WithLabelValues(string(v)).Inc()
	g.cfg.Log.Record(Decision{
		Time: req.start, SandboxID: req.sandboxID, Host: req.target.Host(), Port: req.target.Port,
		Verdict: v, Reason: reason,
	})
	if g.cfg.Logger.Enabled(context.Background(), slog.LevelDebug) {
		g.cfg.Logger.Debug("egress refused", "sandbox_id", req.sandboxID, "target", req.target.String(), "verdict", v, "reason", reason)
	}
	refuse(w, status, reason)
}

// refuse writes a refusal whose body and header say why.
func refuse(w http.ResponseWriter, status int, reason string) {
	w.Header().Set(ReasonHeader, headerSafe(reason))
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	io.WriteString(w, "sbx egress: "+reason+"\n")
}

// headerSafe keeps a reason on one line of printable ASCII, since a
// resolver error or a host name could carry anything.
func headerSafe(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c < 0x20 || c > 0x7e {
			b[i] = '?'
		}
	}
	return string(b)
}

// relayConnect answers a CONNECT and copies bytes both ways until either
// side ends or the tunnel is cancelled.
func (g *Gateway) relayConnect(w http.ResponseWriter, r *http.Request, req *request, up net.Conn, addr netip.Addr) {
	client, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		up.Close()
		g.decide(w, req, http.StatusInternalServerError, Failed, "cannot take over the connection")
		return
	}
	g.relay(r.Context(), req, addr, up, func(ctx context.Context, cu *countingConn) error {
		defer client.Close()
		stop := context.AfterFunc(ctx, func() { client.Close() })
		defer stop()
		if _, err := io.WriteString(client, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
			return err
		}
		// The raw connection, not the counting one, so the kernel can
		// splice the download; pipe counts what it copied.
		sent, received, err := pipe(client, brw.Reader, cu.Conn)
		cu.written.Add(sent)
		cu.read.Add(received)
		return err
	})
}

// relayHTTP forwards one absolute-form request over the connection
// dialed for it and copies the answer back.
func (g *Gateway) relayHTTP(w http.ResponseWriter, r *http.Request, req *request, up net.Conn, addr netip.Addr, rewrite func(*httputil.ProxyRequest)) {
	g.relay(r.Context(), req, addr, up, func(ctx context.Context, cu *countingConn) error {
		var used bool
		tr := &http.Transport{
			// The only connection this request may use is the one
			// dialed to the checked address.
			DialContext: func(context.Context, string, string) (net.Conn, error) {
				if used {
					return nil, errors.New("egress: one connection per request")
				}
				used = true
				return cu, nil
			},
			DisableKeepAlives:     true,
			ResponseHeaderTimeout: 60 * time.Second,
			// Used for an https:// upstream only (credential routes).
			TLSClientConfig: &tls.Config{RootCAs: g.cfg.UpstreamRootCAs, MinVersion: tls.VersionTLS12},
		}
		defer tr.CloseIdleConnections()
		var rerr error
		rp := &httputil.ReverseProxy{
			Rewrite:   rewrite,
			Transport: tr,
			ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
				rerr = err
				refuse(w, http.StatusBadGateway, fmt.Sprintf("%s: %v", req.target, err))
			},
		}
		rp.ServeHTTP(w, r.WithContext(ctx))
		return rerr
	})
}

// relay registers the tunnel, runs copy, and records the decision with
// the bytes it carried and, if it was cut short, why. The record is
// deferred: ReverseProxy ends a failed body copy by panicking with
// http.ErrAbortHandler, which the server recovers.
func (g *Gateway) relay(parent context.Context, req *request, addr netip.Addr, up net.Conn, copy func(context.Context, *countingConn) error) {
	g.wg.Add(1)
	defer g.wg.Done()
	ctx, cancel := context.WithCancelCause(parent)
	defer cancel(nil)
	t := &tunnel{secret: req.secret, target: req.target, addr: addr}
	c, raced := g.tunnels.add(req.epoch, req.sandboxID, t, cancel)
	defer g.tunnels.remove(c)
	if raced {
		// The sandbox may have changed after its policy was read and
		// before the tunnel could be found: ask again now.
		g.recheckOpen(ctx, req.sandboxID)
	}
	g.metrics.decisions.WithLabelValues(string(Allowed)).Inc()
	g.metrics.open.Inc()
	defer g.metrics.open.Dec()

	cu := &countingConn{Conn: up}
	defer cu.Close()
	stop := context.AfterFunc(ctx, func() { cu.Close() })
	defer stop()
	var err error
	defer func() {
		reason := ""
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			reason = endedReason(cause)
		} else if err != nil && !errors.Is(err, net.ErrClosed) {
			reason = err.Error()
		}
		up64, down64 := cu.written.Load(), cu.read.Load()
		g.metrics.bytes.WithLabelValues("up").Add(float64(up64))
		g.metrics.bytes.WithLabelValues("down").Add(float64(down64))
		g.cfg.Log.Record(Decision{
			Time: req.start, SandboxID: req.sandboxID, Host: req.target.Host(), Port: req.target.Port,
			Addr: addr.String(), Verdict: Allowed, Reason: reason, BytesUp: up64, BytesDown: down64,
		})
	}()
	err = copy(ctx, cu)
}

// pipe copies client→up and up→client until both directions end, and
// returns the bytes each way. When one direction reaches EOF it
// half-closes the other side's write so the peer sees the end, as TCP
// would; an error on either closes both.
func pipe(client net.Conn, fromClient *bufio.Reader, up net.Conn) (sent, received int64, err error) {
	type result struct {
		up  bool
		n   int64
		err error
	}
	done := make(chan result, 2) // both copiers report; neither may block
	go func() {
		n, err := io.Copy(up, fromClient)
		closeWrite(up)
		done <- result{true, n, err}
	}()
	go func() {
		n, err := io.Copy(client, up)
		closeWrite(client)
		done <- result{false, n, err}
	}()
	for range 2 {
		r := <-done
		if r.up {
			sent = r.n
		} else {
			received = r.n
		}
		if r.err != nil && err == nil {
			err = r.err
			client.Close()
			up.Close()
		}
	}
	return sent, received, err
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
