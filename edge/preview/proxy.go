package preview

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sbxedge/sbx/edge/internal/slots"
	"github.com/sbxedge/sbx/edge/preview/previewhost"
	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/nonces"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/problem"
)

// Proxy is the preview proxy's http.Handler.
type Proxy struct {
	cfg      Config
	log      *slog.Logger
	routes   *routeCache
	seal     sealer
	tickets  Tickets
	rp       *httputil.ReverseProxy
	tr       *http.Transport
	pool     *upPool // the lean relay's idle upstream connections
	metrics  *metrics
	activity Activity
	waker    Waker

	oidc     *oidc.Provider // nil with DevSignIn
	verifier *oidc.IDTokenVerifier
	oauth    oauth2.Config

	// upstreams maps the transport's per-upstream key to where it dials.
	// Keys include the sandbox's address and host key, so a sandbox that
	// moved gets fresh connections instead of the old pool.
	upstreams sync.Map // string -> Route
	// loopback maps an upstream key to the loopback address its port
	// answered on last (see dialPort).
	loopback sync.Map // string -> string

	inflight *slots.Limit // requests in flight per host
	errBusy  *problem.Problem

	conns   *authority.Registry[*liveConn] // live connections, by what admitted them
	sockets sockets                        // upgraded sockets, for Close
	members *memberCache                   // membership answers for cookie requests
	shares  *shareCache                    // share link answers for share cookies
	// wakes are the wakes in progress (waking.go); wakeCtx ends them at
	// Close.
	wakes     wakes
	wakeCtx   context.Context
	stopWakes context.CancelFunc
	// stopRecheck stops the periodic re-check; recheckDone is closed
	// when it has returned.
	stopRecheck context.CancelFunc
	recheckDone chan struct{}
	// sessions are the browser sessions the connection log records; its
	// sweep runs beside the re-check and stops with it.
	sessions     *browserSessions
	sessionsDone chan struct{}
}

type ctxKey int

// navigationWakeWait is how long a browser navigation waits for a waking
// preview before it is shown the waking page: long enough that a port
// coming up at once is not preceded by a flash of the page.
const navigationWakeWait = 400 * time.Millisecond

const routeKey ctxKey = iota

// New builds the proxy. With OIDC configured it fetches the provider's
// discovery document, so the issuer must be reachable.
func New(ctx context.Context, cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	p := &Proxy{
		cfg: cfg, log: cfg.Logger, seal: sealer{key: cfg.SessionKey, now: cfg.Now},
		routes:   newRouteCache(cfg.Resolver, cfg.RouteTTL, cfg.NegativeTTL, 100_000),
		metrics:  newMetrics(cfg.Registry),
		activity: cfg.Activity, waker: cfg.Waker, inflight: slots.New(cfg.MaxRequestsPerHost),
		errBusy: busyProblem(cfg.MaxRequestsPerHost),
		conns:   authority.New[*liveConn](cfg.Now),
		sockets: sockets{m: map[*wsConn]struct{}{}},
		shares:  newShareCache(cfg.RouteTTL, cfg.Now),
		members: &memberCache{ttl: cfg.RouteTTL, now: cfg.Now, max: 100_000, entries: map[memberKey]memberEntry{}},
	}
	if p.activity == nil {
		p.activity = nopActivity{}
	}
	if p.waker == nil {
		p.waker = nopWaker{}
	}
	if p.tickets = cfg.Tickets; p.tickets == nil {
		p.tickets = nonces.NewMemory(cfg.Now)
	}
	p.routes.now = cfg.Now
	p.wakes.m = map[string]*wakeState{}
	p.wakeCtx, p.stopWakes = context.WithCancel(context.Background())
	if cfg.OIDC != nil {
		prov, err := oidc.NewProvider(ctx, cfg.OIDC.Issuer)
		if err != nil {
			return nil, fmt.Errorf("preview: OIDC discovery for %s: %w", cfg.OIDC.Issuer, err)
		}
		scopes := cfg.OIDC.Scopes
		if len(scopes) == 0 {
			scopes = []string{"email", "profile"}
		}
		p.oidc = prov
		p.verifier = prov.Verifier(&oidc.Config{ClientID: cfg.OIDC.ClientID})
		p.oauth = oauth2.Config{
			ClientID: cfg.OIDC.ClientID, ClientSecret: cfg.OIDC.ClientSecret,
			Endpoint: prov.Endpoint(), RedirectURL: p.apexURL() + "/callback",
			Scopes: append([]string{oidc.ScopeOpenID}, scopes...),
		}
	}
	p.tr = &http.Transport{
		DialContext:         p.dialUpstream,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: cfg.MaxIdleUpstreamPerHost,
		IdleConnTimeout:     90 * time.Second,
		// Dev servers may take long to answer a first request (a cold
		// bundler), but not forever.
		ResponseHeaderTimeout: 5 * time.Minute,
		// Bodies pass through as the sandbox sent them.
		DisableCompression: true,
	}
	p.pool = newUpPool(cfg.MaxIdleUpstreamPerHost, p.tr.IdleConnTimeout, cfg.Now)
	p.rp = &httputil.ReverseProxy{
		Rewrite:   p.rewrite,
		Transport: p.tr,
		// ReverseProxy flushes every write of streamed responses (SSE,
		// unknown length) by itself; bodies of known length are flushed
		// at least this often, without a syscall per 32 KiB write on
		// large downloads.
		FlushInterval:  50 * time.Millisecond,
		ErrorHandler:   p.upstreamError,
		ModifyResponse: p.modifyResponse,
		BufferPool:     copyBuffers{},
		ErrorLog:       slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	rctx, stop := context.WithCancel(context.Background())
	p.stopRecheck, p.recheckDone = stop, make(chan struct{})
	go func() {
		defer close(p.recheckDone)
		p.recheckLoop(rctx, cfg.RecheckInterval)
	}()
	p.sessions = newBrowserSessions(cfg.Connections, cfg.SessionIdle, cfg.Now)
	p.sessionsDone = make(chan struct{})
	go func() {
		defer close(p.sessionsDone)
		p.sessions.run(rctx)
	}()
	return p, nil
}

// Close stops the periodic re-check, closes the WebSockets still open
// (the http.Server, which the caller shuts down first, does not track
// hijacked connections) and drops idle upstream connections. Call it
// once.
func (p *Proxy) Close() {
	p.stopRecheck()
	<-p.recheckDone
	<-p.sessionsDone
	p.stopWakes()
	p.wakes.wg.Wait()
	p.closeConns()
	p.tr.CloseIdleConnections()
	p.pool.close()
}

// Invalidate drops a preview host from the route cache, so a removed or
// changed port takes effect at once.
func (p *Proxy) Invalidate(label string) { p.routes.Invalidate(label) }

func (p *Proxy) apexURL() string { return p.cfg.Scheme + "://" + p.hostFor("") }

// hostFor is the public host[:port] of a label, or of the apex for "".
func (p *Proxy) hostFor(label string) string {
	h := p.cfg.Domain
	if label != "" {
		h = label + "." + h
	}
	if pp := p.cfg.PublicPort; pp != 0 && !(p.cfg.Scheme == "https" && pp == 443) && !(p.cfg.Scheme == "http" && pp == 80) {
		h = net.JoinHostPort(h, strconv.Itoa(pp))
	}
	return h
}

func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := p.cfg.Now()
	// Taken before authority is checked: an invalidation arriving while
	// this request is on its way to being relayed is noticed in track.
	epoch := p.conns.Epoch()
	// The writer and the upstream call share one allocation.
	st := &requestState{cw: countingWriter{ResponseWriter: w}}
	cw := &st.cw
	defer func() { p.metrics.done(cw.status(), cw.n, start) }()

	// Absolute-form targets ("GET http://elsewhere/ HTTP/1.1") would make
	// r.Host disagree with the Host header; a browser never sends them to
	// an origin server, so refuse rather than pick one.
	if r.ProtoMajor == 1 && !strings.HasPrefix(r.RequestURI, "/") && r.RequestURI != "*" {
		writeProblem(cw, r, errBadRequest)
		return
	}
	// A CONNECT that is not a WebSocket asks for a raw tunnel to the app,
	// past every per-request check; h2c carries one to here.
	if r.Method == http.MethodConnect && !isUpgrade(r) {
		writeProblem(cw, r, errConnect)
		return
	}
	kind, label, _ := previewhost.Parse(r.Host, p.cfg.Domain)
	switch kind {
	case previewhost.Apex:
		p.serveLogin(cw, r)
		return
	case previewhost.Invalid:
		writeProblem(cw, r, errUnknownHost)
		return
	}
	// The edge's own paths, and every other spelling of them (reserved.go).
	reserved := reservedSegment(r.URL.Path)
	if reserved {
		switch r.URL.Path {
		case signOutPath:
			p.signOut(cw, r, label)
			return
		case ticketPath, wakeStatusPath: // they need the route
		default:
			writeProblem(cw, r, errReservedPath)
			return
		}
	}
	rt, err := p.routes.get(r.Context(), label)
	if errors.Is(err, ErrHostEnded) {
		writeProblem(cw, r, errEnded)
		return
	}
	if errors.Is(err, ErrUnknownHost) {
		writeProblem(cw, r, errUnknownHost)
		return
	}
	if err != nil {
		p.log.ErrorContext(r.Context(), "resolve preview host", "label", label, "err", err)
		writeProblem(cw, r, errControl)
		return
	}
	if reserved && r.URL.Path == ticketPath {
		p.redeemTicket(cw, r, label, rt)
		return
	}
	if secret, ok := shareSecret(r); ok && !reserved {
		p.redeemShare(cw, r, label, rt, secret)
		return
	}
	g := grant{kind: grantPublic}
	if !rt.Public {
		var ok bool
		if g, ok = p.authorize(cw, r, label, rt); !ok {
			return
		}
	}
	// Authorised from here on: only now may the sandbox be touched.
	if reserved { // wakeStatusPath: the only one left
		p.serveWakeStatus(cw, r, label, rt)
		return
	}
	if !p.inflight.Acquire(label) {
		writeProblem(cw, r, p.errBusy)
		return
	}
	defer p.inflight.Release(label)
	if !rt.Ready || p.wakeRunning(label) {
		// API clients are held until the port answers (or WakeTimeout);
		// a browser gets the waking page after a moment, which follows
		// the wake and lands on the app. A wake makes the route ready
		// before the port answers: whoever comes then waits on that
		// wake too, rather than finding the port closed.
		var ok bool
		if rt, ok = p.awaitWake(cw, r, label, rt); !ok {
			return
		}
	}
	p.activity.Mark(rt.SandboxID)
	if isUpgrade(r) {
		closeWS := p.activity.Open(rt.SandboxID)
		p.metrics.wsOpen.Inc()
		defer func() { p.metrics.wsOpen.Dec(); closeWS() }()
	}
	up := &st.up
	*up = upstreamCall{route: rt, label: label, key: rt.upstream, start: p.cfg.Now()}
	if up.key == "" {
		up.key = upstreamKey(rt)
	}
	// The dialler finds the route by the pool key; stored once per
	// incarnation of the port, not per request.
	if v, ok := p.upstreams.Load(up.key); !ok || v.(Route).Target != rt.Target {
		p.upstreams.Store(up.key, rt)
	}
	ctx, lc, ok := p.track(r, label, rt, g, epoch)
	if !ok {
		writeProblem(cw, r, errForbidden)
		return
	}
	defer p.untrack(lc)
	endSession := p.sessions.begin(r, label, rt, g)
	defer func() { endSession(max(r.ContentLength, 0), cw.n) }()
	if r.Body != nil && r.Body != http.NoBody {
		up.body = &clientBody{ReadCloser: r.Body}
	}
	if p.leanEligible(r) && !isUpgrade(r) {
		p.metrics.relayedLean.Inc()
		p.leanRelay(ctx, cw, r, up)
		return
	}
	p.metrics.relayedRProxy.Inc()
	var w2 http.ResponseWriter = cw
	if isUpgrade(r) {
		w2 = &hijackWriter{ResponseWriter: cw, p: p, c: lc}
	}
	out := r.WithContext(context.WithValue(ctx, routeKey, up))
	if up.body != nil {
		out.Body = up.body
	}
	p.rp.ServeHTTP(w2, out)
	if isUpgrade(r) && cw.code == 0 {
		// ReverseProxy writes the 101 to the hijacked connection, past
		// our writer.
		cw.code = http.StatusSwitchingProtocols
	}
}

// upstreamKey names the transport's connection pool for one exposed port
// of one incarnation of a sandbox.
func upstreamKey(rt Route) string {
	h := fnv.New64a()
	h.Write([]byte(rt.Target.Addr + "\x00" + rt.Target.ForwardAddr + "\x00" + rt.Target.HostKey + "\x00" + rt.Target.User))
	return fmt.Sprintf("%s-%d-%x.upstream", rt.SandboxID, rt.Port, h.Sum64())
}

// rewrite builds the upstream request. The URL's host is only a pool key
// for our own dialler; the address dialled is always the loopback
// <port> inside the route's sandbox.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	up := pr.In.Context().Value(routeKey).(*upstreamCall)
	rt := up.route
	pr.Out.URL.Scheme = "http"
	pr.Out.URL.Host = up.key
	p.forwardHeaders(pr.Out.Header, pr.In, nil)
	pr.Out.Host = outboundHost(pr.In, rt)
	if !isUpgrade(pr.In) {
		// ReverseProxy relays any Upgrade; only WebSockets pass here
		// (an h2c upgrade would hand the client a raw tunnel to the
		// app, past the proxy's per-request checks).
		pr.Out.Header.Del("Upgrade")
		pr.Out.Header.Del("Connection")
	}
}

// forwardHeaders applies the proxy's rules to the headers of in as they
// go upstream: X-Forwarded-For/Host/Proto from this request only, none of
// the client's forwarding claims, none of our credentials. The three
// values are held in vals (the lean relay's pooled array; nil: a new
// one), one allocation instead of a slice per Set.
func (p *Proxy) forwardHeaders(h http.Header, in *http.Request, vals *[3]string) {
	dropClientForwarding(h)
	if vals == nil {
		vals = new([3]string)
	}
	if ip, _, err := net.SplitHostPort(in.RemoteAddr); err == nil {
		vals[0] = ip
		h["X-Forwarded-For"] = vals[0:1:1]
	}
	vals[1] = in.Host
	h["X-Forwarded-Host"] = vals[1:2:2]
	vals[2] = "http"
	if in.TLS != nil || p.cfg.Scheme == "https" {
		vals[2] = "https"
	}
	h["X-Forwarded-Proto"] = vals[2:3:3]
	stripCredentials(h)
}

// outboundHost is the Host the sandbox's app is sent: the preview host,
// or localhost:<port> for dev servers that insist on it.
func outboundHost(in *http.Request, rt Route) string {
	if rt.RewriteHost {
		return "localhost:" + strconv.Itoa(rt.Port)
	}
	return in.Host
}

// stripCredentials removes everything of ours the sandbox's code must not
// see: the Authorization header, the preview-token header, and our
// cookies (other cookies, the app's own, pass).
func stripCredentials(h http.Header) {
	h.Del("Authorization")
	h.Del(tokenHeader)
	cookies := h.Values("Cookie")
	if len(cookies) == 0 {
		return
	}
	h.Del("Cookie")
	var keep []string
	for _, line := range cookies {
		for _, c := range strings.Split(line, ";") {
			c = strings.TrimSpace(c)
			name, _, _ := strings.Cut(c, "=")
			if c == "" || strings.HasPrefix(name, cookiePrefix) {
				continue
			}
			keep = append(keep, c)
		}
	}
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// dialUpstream opens a direct-tcpip channel to the port inside the
// sandbox over its pooled SSH connection (see dialPort).
func (p *Proxy) dialUpstream(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, _ := net.SplitHostPort(addr)
	v, ok := p.upstreams.Load(host)
	if !ok {
		return nil, fmt.Errorf("preview: no route for upstream %s", host)
	}
	return p.dialRoute(ctx, v.(Route), host)
}

// dialRoute opens a direct-tcpip channel to rt's port in its sandbox;
// key is the route's upstream key (see dialPort).
func (p *Proxy) dialRoute(ctx context.Context, rt Route, key string) (net.Conn, error) {
	start := p.cfg.Now()
	conn, err := p.dialPort(ctx, rt, key)
	if err != nil {
		return nil, err
	}
	p.metrics.dial.Observe(p.cfg.Now().Sub(start).Seconds())
	return conn, nil
}

// loopbacks are the addresses a port is looked for at inside the
// sandbox, in order: dev servers bind "localhost", which resolves to
// either (Node 17+ and Vite pick ::1 on many systems).
var loopbacks = [...]string{"127.0.0.1", "::1"}

// dialPort connects to rt's port through the sandbox's forwarder when it
// has one and the proxy has Forwarders. Otherwise it opens a direct-tcpip
// channel to the port on the sandbox's loopback, IPv4 first, then IPv6. Only the sandbox refusing the channel
// (nothing listening there) moves on to the next address; a broken SSH
// connection does not. The address that answered is remembered per
// upstream key (empty: not remembered), so a server on ::1 costs one
// refused channel per incarnation of its port, not one per connection.
func (p *Proxy) dialPort(ctx context.Context, rt Route, key string) (net.Conn, error) {
	if p.cfg.Forwarders != nil && rt.Target.ForwardAddr != "" {
		// The forwarder tries both loopbacks itself.
		conn, err := p.cfg.Forwarders.Dial(ctx, rt.Target, rt.Port)
		switch {
		case errors.Is(err, podtcp.ErrRefused):
			return nil, fmt.Errorf("port %d in sandbox %s: %w (%w)", rt.Port, rt.SandboxID, errPortClosed, err)
		case errors.Is(err, syscall.ECONNREFUSED):
			// Nothing listens at the forwarder's address: an image from
			// before the forwarder, or one that runs none. The SSH road
			// has its own proofs; take it.
			p.log.DebugContext(ctx, "no port forwarder in the sandbox; taking the SSH road", "sandbox_id", rt.SandboxID, "forward_addr", rt.Target.ForwardAddr)
		default:
			return conn, err
		}
	}
	c, err := p.cfg.Pods.Client(ctx, rt.Target)
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %s: %w", rt.SandboxID, err)
	}
	order := loopbacks
	if v, ok := p.loopback.Load(key); ok && v.(string) == loopbacks[1] {
		order[0], order[1] = order[1], order[0]
	}
	port := strconv.Itoa(rt.Port)
	var errs []error
	for _, host := range order {
		conn, err := c.DialContext(ctx, "tcp", net.JoinHostPort(host, port))
		if err == nil {
			if key != "" {
				p.loopback.Store(key, host)
			}
			return conn, nil
		}
		errs = append(errs, err)
		if !isRefused(err) {
			return nil, fmt.Errorf("open channel to port %d in sandbox %s: %w", rt.Port, rt.SandboxID, errors.Join(errs...))
		}
	}
	return nil, fmt.Errorf("port %d in sandbox %s: %w (%w)", rt.Port, rt.SandboxID, errPortClosed, errors.Join(errs...))
}

func (p *Proxy) modifyResponse(resp *http.Response) error {
	up, _ := resp.Request.Context().Value(routeKey).(*upstreamCall)
	p.answerRules(resp.Header, up)
	return nil
}

// answerRules applies the proxy's rules to an answer's headers, on
// either relay; up is nil when unknown.
func (p *Proxy) answerRules(h http.Header, up *upstreamCall) {
	// Time to response headers is the sandbox's latency as users feel it.
	if up != nil {
		p.metrics.upstream.Observe(p.cfg.Now().Sub(up.start).Seconds())
	}
	hostOnlyCookies(h)
}

// requestState is what ServeHTTP allocates per request.
type requestState struct {
	cw countingWriter
	up upstreamCall
}

// upstreamCall is what ServeHTTP hands the ReverseProxy's callbacks, in
// one context value: the route, its transport pool key and the start.
type upstreamCall struct {
	route Route
	label string
	key   string
	start time.Time
	body  *clientBody // nil without a body
}

// clientBody remembers why reading the client's body failed, so that a
// broken body (bad chunk framing, a client gone mid-upload) is answered
// as the client's fault rather than as an unreachable upstream.
type clientBody struct {
	io.ReadCloser
	mu  sync.Mutex // guards err: the transport reads, the handler asks
	err error
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}
	return n, err
}

func (b *clientBody) failed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err != nil
}

// copyBuffers recycles ReverseProxy's body copy buffers (32 KiB, an SSH
// packet's worth), which it would otherwise allocate per response.
type copyBuffers struct{}

// copyBufferPool holds pointers, so that the lean relay's Put costs no
// allocation (a []byte put in a sync.Pool boxes its header).
var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (copyBuffers) Get() []byte { return *copyBufferPool.Get().(*[]byte) }

// Put takes the slice alone (ReverseProxy's BufferPool fixes the type):
// its pointer costs the one small allocation that boxing it did.
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }

func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	up, _ := r.Context().Value(routeKey).(*upstreamCall)
	p.relayError(w, r, up, err)
}

// relayError answers a request whose relay failed before the answer's
// head was written, on either relay; up is nil when unknown.
func (p *Proxy) relayError(w http.ResponseWriter, r *http.Request, up *upstreamCall, err error) {
	if errors.Is(err, context.Canceled) {
		// The client went away; nobody is listening for an answer.
		w.WriteHeader(499)
		return
	}
	var rt Route
	if up != nil {
		rt = up.route
		if up.body != nil && up.body.failed() {
			writeProblem(w, r, errBadBody)
			return
		}
	}
	if errors.Is(err, errPortClosed) && rt.SandboxID != "" {
		p.portClosed(w, r, up, err)
		return
	}
	p.log.InfoContext(r.Context(), "preview upstream failed", "sandbox_id", rt.SandboxID, "port", rt.Port, "err", err)
	writeProblem(w, r, errUpstream)
}

// portClosed answers a request to a ready sandbox whose port refused. A
// port a service declares and that is (re)starting is waking: a browser
// gets the waking page, an API client 503 with Retry-After. Otherwise
// nothing will answer by itself, and the page says what to do. up comes
// from the caller, not from r's context: the lean relay's r carries none.
func (p *Proxy) portClosed(w http.ResponseWriter, r *http.Request, up *upstreamCall, err error) {
	rt := up.route
	svc, askErr := p.portService(r.Context(), rt)
	name, state := svc.Name, svc.State
	if askErr != nil {
		// The port refused just now; that is what the answer says.
		p.log.DebugContext(r.Context(), "ask sandbox init", "sandbox_id", rt.SandboxID, "port", rt.Port, "err", askErr)
	}
	if name != "" && svc.QuickExits >= crashLoopExits && svc.ExitCode != nil {
		// It keeps exiting: waiting would only hold the caller.
		crash := &crashLoopError{service: name, code: *svc.ExitCode, logs: p.serviceTail(r.Context(), rt, name)}
		p.log.InfoContext(r.Context(), "preview service crashing", "sandbox_id", rt.SandboxID, "port", rt.Port, "service", name, "code", *svc.ExitCode)
		writeRouteProblem(w, r, crashLoopPage(crash), rt, name)
		return
	}
	if name != "" && state != initproto.StateExited {
		if isNavigation(r) {
			p.writeWakingPage(w, r, p.startWake(up.label, rt))
			return
		}
		pg := *errWakeTimeout
		pg.Detail = fmt.Sprintf("service %s is starting; port %d does not answer yet", name, rt.Port)
		pg.RetryAfter = 2 * time.Second
		writeProblem(w, r, &pg)
		return
	}
	p.log.InfoContext(r.Context(), "preview port closed", "sandbox_id", rt.SandboxID, "port", rt.Port, "err", err)
	writeRouteProblem(w, r, portClosedPage(rt.Port), rt, "")
}

// AllowCertificate is the on-demand TLS gate: a certificate may be ordered
// for the apex and for labels that resolve to a live route now, and for
// nothing else, so a scanner sending random SNI names cannot spend our
// ACME rate limit.
func (p *Proxy) AllowCertificate(ctx context.Context, name string) error {
	kind, label, port := previewhost.Parse(name, p.cfg.Domain)
	switch {
	case port != "" || kind == previewhost.Invalid:
		return fmt.Errorf("preview: %q is not a preview host", name)
	case kind == previewhost.Apex:
		return nil
	}
	if _, err := p.routes.get(ctx, label); err != nil {
		return fmt.Errorf("preview: no certificate for %q: %w", name, err)
	}
	return nil
}
