package preview_test

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oauth2-proxy/mockoidc"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/internal/sshdtest"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/podtcp/podtcptest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(everyRoad{m})
}

// The suite runs three times, and the rules hold on every pass:
//   - the lean relay over the sandbox's port forwarder (podtcp), the
//     production default;
//   - the lean relay over direct-tcpip channels (the SSH road);
//   - every request through httputil.ReverseProxy (DisableLeanRelay)
//     over the SSH road. WebSockets, HTTP/2 and streamed bodies take
//     ReverseProxy on every pass, so it meets the forwarder too.
var (
	// sshRoadPass routes with no forwarder address: the SSH road.
	sshRoadPass bool
	// reverseProxyPass sets DisableLeanRelay.
	reverseProxyPass bool
)

// everyRoad runs the passes. A fuzzing run (and its workers) runs once:
// the fuzz target compares the two relays itself.
type everyRoad struct{ m *testing.M }

func (b everyRoad) Run() int {
	code := b.m.Run()
	if code != 0 || flag.Lookup("test.fuzz").Value.String() != "" || flag.Lookup("test.fuzzworker").Value.String() == "true" {
		return code
	}
	// Another pass would overwrite the profiles of the first.
	for _, f := range []string{"test.cpuprofile", "test.memprofile", "test.blockprofile", "test.mutexprofile", "test.trace"} {
		if flag.Lookup(f).Value.String() != "" {
			fmt.Printf("=== no second pass: -%s would be overwritten\n", f)
			return code
		}
	}
	fmt.Println("=== second pass: the SSH road (direct-tcpip channels), lean relay")
	sshRoadPass = true
	if code = b.m.Run(); code != 0 {
		return code
	}
	fmt.Println("=== third pass: the SSH road, every request through httputil.ReverseProxy (DisableLeanRelay)")
	reverseProxyPass = true
	return b.m.Run()
}

const domain = "preview.localhost"

// fakeResolver is control's side of routing. mu guards routes and calls.
type fakeResolver struct {
	mu     sync.Mutex
	routes map[string]preview.Route
	ended  map[string]bool // labels whose sandbox ended
	calls  int
}

func (f *fakeResolver) Resolve(_ context.Context, label string) (preview.Route, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	rt, ok := f.routes[label]
	if f.ended[label] {
		return preview.Route{}, preview.ErrHostEnded
	}
	if !ok {
		return preview.Route{}, preview.ErrUnknownHost
	}
	return rt, nil
}

func (f *fakeResolver) set(label string, rt preview.Route) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.routes[label] = rt
}

// end makes label's sandbox ended, as control then answers.
func (f *fakeResolver) end(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ended == nil {
		f.ended = map[string]bool{}
	}
	f.ended[label] = true
}

func (f *fakeResolver) remove(label string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.routes, label)
}

// fakeAccounts knows tokens and (issuer, subject) memberships. mu guards
// both maps, which tests change while connections are open.
type fakeAccounts struct {
	mu      sync.Mutex
	tokens  map[string]string // secret -> account
	members map[string]string // subject -> account
}

func (f *fakeAccounts) TokenAccount(_ context.Context, secret string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if a, ok := f.tokens[secret]; ok {
		return a, nil
	}
	return "", preview.ErrInvalidToken
}

func (f *fakeAccounts) Member(_ context.Context, id preview.Identity, acct string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.members[id.Subject] == acct, nil
}

func (f *fakeAccounts) revokeToken(secret string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tokens, secret)
}

func (f *fakeAccounts) removeMember(subject string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.members, subject)
}

// env is one proxy in front of one real sshd "sandbox" with its port
// forwarder; the upstream handler listens on loopback, which is the
// sandbox's 127.0.0.1 as seen through sshd's direct-tcpip or the
// forwarder.
type env struct {
	t     testing.TB
	proxy *preview.Proxy
	addr  string // the proxy's listener
	res   *fakeResolver
	accts *fakeAccounts
	ca    *sshca.CA
	sshd  *sshdtest.Server
	// forward is the sandbox's port forwarder's address; routes carry
	// it except on the SSH-road passes.
	forward  string
	upstream *upstreamLog
	// upPort is the port the test upstream listens on inside the sandbox.
	upPort int
	reg    *prometheus.Registry
	// oidc is the identity provider of newOIDCEnv, nil otherwise.
	oidc *mockoidc.MockOIDC
	// cfg is the proxy's configuration, for twin.
	cfg preview.Config
}

const (
	tokenA = "sbx_at_tokenOfAccountA"
	tokenB = "sbx_at_tokenOfAccountB"
)

// upstreamLog records every request the sandbox's server saw.
type upstreamLog struct {
	mu   sync.Mutex
	reqs []*http.Request
	n    atomic.Int64
}

func (u *upstreamLog) add(r *http.Request) {
	u.n.Add(1)
	u.mu.Lock()
	defer u.mu.Unlock()
	u.reqs = append(u.reqs, r.Clone(context.Background()))
}

func (u *upstreamLog) last() *http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.reqs) == 0 {
		return nil
	}
	return u.reqs[len(u.reqs)-1]
}

func (u *upstreamLog) all() []*http.Request {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]*http.Request(nil), u.reqs...)
}

type envOptions struct {
	oidc  *preview.OIDCConfig
	dev   *preview.DevSignIn
	waker preview.Waker
	// key signs cookies and tickets (default: random); replicas share it.
	key []byte
	// tickets is the redeemed-ticket record (default: in-process).
	tickets preview.Tickets
	// recheck is the proxy's backstop re-check interval (default: the
	// proxy's default).
	recheck time.Duration
	// sshdConfig lines are added to the sandbox's sshd_config.
	sshdConfig []string
	// wakeTimeout overrides the proxy's WakeTimeout.
	wakeTimeout time.Duration
	// reverseProxy sends every request through httputil.ReverseProxy,
	// as the suite's second pass does for all.
	reverseProxy bool
}

func newEnv(t testing.TB, app http.Handler, opts ...envOptions) *env {
	t.Helper()
	if !sshdtest.Available() {
		t.Fatalf("%s is required (apt-get install openssh-server)", sshdtest.Binary)
	}
	var o envOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, ca: ca, upstream: &upstreamLog{}, res: &fakeResolver{routes: map[string]preview.Route{}}}
	e.sshd = sshdtest.Start(t, ca.AuthorizedKey(), o.sshdConfig...)
	e.forward = startForwarder(t, e.sshd, ca)

	// The sandbox's dev server, bound to loopback only.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.upPort = upLn.Addr().(*net.TCPAddr).Port
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.upstream.add(r)
		app.ServeHTTP(w, r)
	}), ReadHeaderTimeout: 10 * time.Second}
	upDone := make(chan struct{})
	go func() { defer close(upDone); _ = up.Serve(upLn) }()

	pool := podssh.NewPool(ca, nil, podssh.WithKeyID("edge"))
	key := o.key
	if key == nil {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
	}
	cfg := preview.DefaultConfig()
	cfg.Domain, cfg.Scheme = domain, "http"
	cfg.Resolver, cfg.Pods = e.res, pool
	cfg.Forwarders = &podtcp.Dialer{CA: ca, KeyID: "edge"}
	e.accts = &fakeAccounts{
		tokens:  map[string]string{tokenA: "acct-a", tokenB: "acct-b"},
		members: map[string]string{"alice": "acct-a", "bob": "acct-b"},
	}
	cfg.Accounts = e.accts
	if o.recheck > 0 {
		cfg.RecheckInterval = o.recheck
	}
	if o.wakeTimeout > 0 {
		cfg.WakeTimeout = o.wakeTimeout
	}
	cfg.SessionKey, cfg.Tickets = key, o.tickets
	cfg.OIDC, cfg.DevSignIn, cfg.Waker = o.oidc, o.dev, o.waker
	cfg.DisableLeanRelay = o.reverseProxy || reverseProxyPass
	if cfg.OIDC == nil && cfg.DevSignIn == nil {
		cfg.DevSignIn = &preview.DevSignIn{AccountID: "acct-a", User: "dev"}
	}
	e.reg = prometheus.NewRegistry()
	cfg.Registry = e.reg
	e.cfg = cfg
	if testing.Verbose() {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.PublicPort = ln.Addr().(*net.TCPAddr).Port
	e.proxy, err = preview.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	srv := preview.NewServer(e.proxy, slog.New(slog.DiscardHandler), true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		<-done
		e.proxy.Close()
		_ = pool.Close()
		_ = up.Close()
		<-upDone
	})
	return e
}

// twin starts a second proxy, configured as the first but for
// DisableLeanRelay, in front of the same resolver, accounts and pods; it
// answers for the same public port (send it the first proxy's Host). It
// returns the twin's listener address and metrics registry.
func (e *env) twin(reverseProxy bool) (string, *prometheus.Registry) {
	e.t.Helper()
	cfg := e.cfg
	cfg.DisableLeanRelay = reverseProxy
	reg := prometheus.NewRegistry()
	cfg.Registry = reg
	p, err := preview.New(context.Background(), cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		e.t.Fatal(err)
	}
	srv := preview.NewServer(p, slog.New(slog.DiscardHandler), true)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
		<-done
		p.Close()
	})
	return ln.Addr().String(), reg
}

// expose routes label to the test upstream in a sandbox of acct.
func (e *env) expose(label, sandboxID, acct string, public, rewriteHost bool) {
	e.res.set(label, preview.Route{
		SandboxID: sandboxID, AccountID: acct, Port: e.upPort, Public: public, RewriteHost: rewriteHost, Ready: true,
		Target: e.target(sandboxID),
	})
}

// target is how the proxy reaches the test sandbox: its sshd, and its
// forwarder unless this is an SSH-road pass.
func (e *env) target(sandboxID string) podssh.Target {
	t := podssh.Target{SandboxID: sandboxID, Addr: e.sshd.Addr, User: e.sshd.User, HostKey: e.sshd.HostKey}
	if !sshRoadPass {
		t.ForwardAddr = e.forward
	}
	return t
}

// startForwarder runs a port forwarder for the sandbox of sshd, with its
// host key and trusting ca, until the test ends.
func startForwarder(t testing.TB, sshd *sshdtest.Server, ca *sshca.CA) string {
	return podtcptest.Serve(t, podtcp.Keys{HostKey: sshd.HostSigner, UserCAs: []ssh.PublicKey{ca.PublicKey()}, Principal: sshd.User})
}

// host is label's public host:port; "" is the apex (the login host).
func (e *env) host(label string) string {
	if label == "" {
		return domain + ":" + strconv.Itoa(e.port())
	}
	return label + "." + domain + ":" + strconv.Itoa(e.port())
}

func (e *env) port() int {
	_, p, _ := net.SplitHostPort(e.addr)
	n, _ := strconv.Atoi(p)
	return n
}

func (e *env) url(label, path string) string { return "http://" + e.host(label) + path }

// client is a Go HTTP client that reaches every *.preview.localhost host at
// the proxy's listener and never follows redirects.
func (e *env) client() *http.Client {
	d := &net.Dialer{}
	return &http.Client{
		Transport: &http.Transport{DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, e.addr)
		}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       time.Minute,
	}
}

func (e *env) get(label, path string, hdr ...string) (*http.Response, string) {
	e.t.Helper()
	req, err := http.NewRequest("GET", e.url(label, path), nil)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	c := e.client()
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		e.t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}
