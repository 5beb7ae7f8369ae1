package preview_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
	"github.com/sbxedge/sbx/internal/testkit/closedport"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// gateWaker wakes each sandbox by its own rule: a sandbox in gates waits
// until its channel closes, one in ended never wakes.
type gateWaker struct {
	mu    sync.Mutex // guards the maps
	gates map[string]chan struct{}
	ended map[string]bool
	ready map[string]func()
}

func (g *gateWaker) Wake(ctx context.Context, id string) error {
	g.mu.Lock()
	gate, ended, ready := g.gates[id], g.ended[id], g.ready[id]
	g.mu.Unlock()
	if ended {
		return fmt.Errorf("control says: %w", preview.ErrSandboxEnded)
	}
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if ready != nil {
		ready()
	}
	return nil
}

// initStatus makes the sandbox's sshd answer the init's subsystem with a
// fixed list of services (read from a file the test writes), as an init
// whose service is still starting would.
func initStatus(t testing.TB, services ...initproto.Status) []string {
	return []string{"Subsystem " + initproto.Subsystem + " read request; cat " + statusFile(t, services...)}
}

// statusFile writes the init's answer listing services, and returns its
// path.
func statusFile(t testing.TB, services ...initproto.Status) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "status.json")
	b, _ := json.Marshal(initproto.Response{Services: services})
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// asleep exposes label for sandbox sbx in account acct, then puts its
// route to sleep on port; it returns the route as it will be once the
// sandbox is ready again.
func asleep(t testing.TB, e *env, label, sbx, acct string, port int) preview.Route {
	t.Helper()
	e.expose(label, sbx, acct, false, false)
	ready, _ := e.res.Resolve(t.Context(), label)
	ready.Port = port
	e.res.set(label, preview.Route{SandboxID: sbx, AccountID: acct, Port: port})
	return ready
}

// closedPorts are the ports freePort holds closed, for listenOn.
var closedPorts sync.Map // int → *closedport.Port

// freePort returns a port that refuses on both loopbacks and that no
// other test can take (a port merely found free once was, under make
// race, taken by another package's listener on 127.0.0.1, which the wake
// then reached instead of the app); listenOn opens it.
func freePort(t testing.TB) int {
	t.Helper()
	p := closedport.New(t)
	closedPorts.Store(p.N, p)
	t.Cleanup(func() { closedPorts.Delete(p.N) })
	return p.N
}

// listenOn listens on host at a port freePort gave.
func listenOn(host string, port int) (net.Listener, error) {
	v, ok := closedPorts.Load(port)
	if !ok {
		return nil, fmt.Errorf("port %d is not one freePort gave", port)
	}
	return v.(*closedport.Port).Listen(host)
}

// TestWakingPageInBrowser: a browser opening a suspended private preview
// sees the waking page name the sandbox, the port and each step
// (restoring, then starting the service that declares the port), and then
// lands on the app by itself, with no 502 on the way. The designed error
// pages are screenshotted alongside.
func TestWakingPageInBrowser(t *testing.T) {
	t.Parallel()
	m, cfg := startOIDC(t)
	appPort := freePort(t)
	waker := &gateWaker{gates: map[string]chan struct{}{}, ended: map[string]bool{"sbx-gone": true}, ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{
		oidc: cfg, waker: waker,
		sshdConfig: initStatus(t, initproto.Status{Service: initproto.Service{Name: "vite", Command: "npm run dev", Port: appPort}, State: "starting"}),
	})
	ready := asleep(t, e, "sleepy", "sbx-sleepy", "acct-a", appPort)
	gate := make(chan struct{})
	waker.gates["sbx-sleepy"] = gate
	waker.ready["sbx-sleepy"] = func() { e.res.set("sleepy", ready) }

	dir := chromiumtest.ArtifactDir(t)
	ctx := chromiumtest.New(t, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(900, 640)); err != nil {
		t.Fatal(err)
	}
	documents, _ := chromiumtest.Documents(t, ctx)

	m.QueueUser(user("alice"))
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("sleepy", "/dash"))); err != nil {
		t.Fatal(err)
	}
	waitStep := func(step string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](
			`document.querySelector('main[data-step="`+step+`"]')`, chromedp.WithPollingTimeout(30*time.Second))); err != nil {
			body, _ := chromedp.Run(ctx, chromedp.Text("body"))
			t.Fatalf("waiting for step %s: %v; page shows %q", step, err, body)
		}
	}
	waitStep("restoring")
	body, _ := chromedp.Run(ctx, chromedp.Text("body"))
	for _, want := range []string{"Waking up your sandbox", "sbx-sleepy", fmt.Sprintf("port %d", appPort), "Restoring the workspace"} {
		if !strings.Contains(body, want) {
			t.Errorf("waking page %q does not show %q", body, want)
		}
	}
	if strings.Contains(body, "Service Unavailable") {
		t.Errorf("waking page says Service Unavailable: %q", body)
	}
	chromiumtest.Screenshot(t, ctx, dir, "waking-restoring")

	close(gate) // the restore finishes; the service is still starting
	waitStep("starting_service")
	if body, _ := chromedp.Run(ctx, chromedp.Text("#s1")); !strings.Contains(body, "Starting vite") {
		t.Errorf("service step reads %q, want it to name the service", body)
	}
	chromiumtest.Screenshot(t, ctx, dir, "waking-starting-service")

	// The dev server comes up: the page switches to the app by itself.
	ln, err := listenOn("127.0.0.1", appPort)
	if err != nil {
		t.Fatal(err)
	}
	app := &http.Server{Handler: newTestApp(), ReadHeaderTimeout: 10 * time.Second}
	appDone := make(chan struct{})
	go func() { defer close(appDone); _ = app.Serve(ln) }()
	t.Cleanup(func() { _ = app.Close(); <-appDone })
	waitText(t, ctx, "hello from the sandbox", 30*time.Second)
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != e.url("sleepy", "/dash") {
		t.Errorf("landed at %s, want the page first asked for", loc)
	}
	seen := documents()
	for _, d := range seen {
		if strings.HasPrefix(d, "502") || strings.HasPrefix(d, "504") {
			t.Errorf("the browser was shown %s on the way to the app (documents: %q)", d, seen)
		}
	}
	if n := len(seen); n == 0 || !strings.HasPrefix(seen[n-1], "200 ") {
		t.Errorf("documents loaded %q, want the app's 200 last", seen)
	}

	// The designed error pages, each with what to do and its code.
	closedPort := freePort(t)
	e.res.set("closed", preview.Route{SandboxID: "sbx-a", AccountID: "acct-a", Port: closedPort, Ready: true, Target: ready.Target})
	e.res.set("gone", preview.Route{SandboxID: "sbx-gone", AccountID: "acct-a", Port: appPort})
	for _, pg := range []struct {
		name, label, code, text string
		status                  int
	}{
		{"error-unknown-host", "nosuchpreview", "preview_not_found", "No preview at this address", 404},
		{"error-port-not-listening", "closed", "upstream_unreachable", fmt.Sprintf("nothing is listening on port %d", closedPort), 502},
		{"error-sandbox-ended", "gone", "sandbox_ended", "This sandbox has ended", 410},
	} {
		if pg.status != 404 { // an unknown host is answered before any sign-in
			m.QueueUser(user("alice"))
		}
		resp, err := chromedp.RunResponse(ctx, chromedp.Navigate(e.url(pg.label, "/")))
		if err != nil {
			t.Fatalf("%s: %v", pg.name, err)
		}
		body, _ := chromedp.Run(ctx, chromedp.Text("body"))
		if int(resp.Status) != pg.status || !strings.Contains(body, pg.code) || !strings.Contains(strings.ToLower(body), strings.ToLower(pg.text)) || !strings.Contains(body, "What to do") {
			t.Errorf("%s: %d %q, want %d naming %q, %q and what to do", pg.name, resp.Status, body, pg.status, pg.code, pg.text)
		}
		chromiumtest.Screenshot(t, ctx, dir, pg.name)
	}
	bctx := chromiumtest.New(t, time.Minute)
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(900, 640)); err != nil {
		t.Fatal(err)
	}
	m.QueueUser(user("bob"))
	if err := chromedp.Do(bctx, chromedp.Navigate(e.url("sleepy", "/"))); err != nil {
		t.Fatal(err)
	}
	if body, _ := chromedp.Run(bctx, chromedp.Text("body")); !strings.Contains(body, "preview_forbidden") || !strings.Contains(body, "What to do") {
		t.Errorf("bob's page: %q", body)
	}
	chromiumtest.Screenshot(t, bctx, dir, "error-forbidden")
}

// TestWakeStatusStaysWithItsOrigin: the waking page's status endpoint
// answers the preview's own pages only; another origin's script riding
// on the session cookie is refused, nothing it gets is readable
// cross-origin, and it wakes nothing.
func TestWakeStatusStaysWithItsOrigin(t *testing.T) {
	t.Parallel()
	waker := &gateWaker{gates: map[string]chan struct{}{"sbx-a": make(chan struct{})}, ready: map[string]func(){}}
	m, cfg := startOIDC(t)
	e := newEnv(t, newTestApp(), envOptions{waker: waker, oidc: cfg})
	e.res.set("napping", preview.Route{SandboxID: "sbx-a", AccountID: "acct-a", Port: e.upPort})
	m.QueueUser(user("alice"))
	cookie, _ := login(t, e, "napping", "/")
	if cookie == nil {
		t.Fatal("no session cookie")
	}
	statusURL := "/__sbx_preview/wake-status"
	for _, tc := range []struct {
		name string
		hdr  []string
		want int
	}{
		{"sibling preview's fetch", []string{"Sec-Fetch-Site", "same-site", "Sec-Fetch-Mode", "cors", "Origin", "http://" + e.host("evil")}, 403},
		{"cross-site fetch", []string{"Sec-Fetch-Site", "cross-site", "Sec-Fetch-Mode", "cors", "Origin", "https://evil.example"}, 403},
		{"old browser, foreign Origin", []string{"Origin", "https://evil.example"}, 403},
		{"no credentials", nil, 401},
	} {
		hdr := tc.hdr
		if tc.want != 401 {
			hdr = append(hdr, "Cookie", cookie.Name+"="+cookie.Value)
		}
		resp, body := e.get("napping", statusURL, hdr...)
		if resp.StatusCode != tc.want || strings.Contains(body, "sbx-a") || strings.Contains(body, "step") {
			t.Errorf("%s: %d %s, want %d and nothing about the sandbox", tc.name, resp.StatusCode, body, tc.want)
		}
	}
	if n := len(waker.gates); n != 1 {
		t.Fatal("gates changed")
	}
	// The page's own poll: JSON, readable by it only.
	resp, body := e.get("napping", statusURL, "Sec-Fetch-Site", "same-origin", "Sec-Fetch-Mode", "cors", "Cookie", cookie.Name+"="+cookie.Value)
	var st struct {
		Step      string `json:"step"`
		SandboxID string `json:"sandbox_id"`
		Port      int    `json:"port"`
	}
	_ = json.Unmarshal([]byte(body), &st)
	if resp.StatusCode != 200 || st.Step != "restoring" || st.SandboxID != "sbx-a" || st.Port != e.upPort {
		t.Fatalf("own page's status: %d %s", resp.StatusCode, body)
	}
	if h := resp.Header.Get("Access-Control-Allow-Origin"); h != "" {
		t.Errorf("status answers Access-Control-Allow-Origin %q: another origin could read it", h)
	}
	close(waker.gates["sbx-a"])
}

// TestAPIClientHeldUntilPortAnswers: after the sandbox is ready, an API
// client is still held while the declared service starts, and answered by
// the app once its port does, not with a 502.
func TestAPIClientHeldUntilPortAnswers(t *testing.T) {
	t.Parallel()
	appPort := freePort(t)
	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker,
		sshdConfig: initStatus(t, initproto.Status{Service: initproto.Service{Name: "web", Command: "x", Port: appPort}, State: "starting"})})
	ready := asleep(t, e, "later", "sbx-a", "acct-a", appPort)
	// The service listens a while after the sandbox is ready.
	appUp := serveLater(t, waker, "sbx-a", func() { e.res.set("later", ready) }, appPort, 700*time.Millisecond)
	resp, body := e.get("later", "/api", "Authorization", "Bearer "+tokenA)
	<-appUp
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from the sandbox") {
		t.Fatalf("held API client: %d %q, want the app's answer", resp.StatusCode, body)
	}
}

// TestWakeOutlastsAFailedInitAsk: an ask of the init that fails (here it
// answers once, then with something that is not an answer) says nothing
// about the port, so the wake goes on waiting for it instead of failing as
// if no service declared it (what a browser once saw under load in make
// test).
func TestWakeOutlastsAFailedInitAsk(t *testing.T) {
	t.Parallel()
	appPort := freePort(t)
	status := statusFile(t, initproto.Status{Service: initproto.Service{Name: "web", Command: "x", Port: appPort}, State: "starting"})
	asked := filepath.Join(t.TempDir(), "asked")
	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker, wakeTimeout: time.Minute, sshdConfig: []string{
		"Subsystem " + initproto.Subsystem + " read request; if [ -e " + asked + " ]; then echo garbled; exit 1; fi; touch " + asked + "; cat " + status,
	}})
	ready := asleep(t, e, "flaky", "sbx-a", "acct-a", appPort)
	// Long enough for the wake to ask the init a few times (every
	// 500 ms): once answered, then failing.
	appUp := serveLater(t, waker, "sbx-a", func() { e.res.set("flaky", ready) }, appPort, 2*time.Second)
	resp, body := e.get("flaky", "/api", "Authorization", "Bearer "+tokenA)
	<-appUp
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from the sandbox") {
		t.Fatalf("held API client with an init failing to answer: %d %q, want the app's answer", resp.StatusCode, body)
	}
	if _, err := os.Stat(asked); err != nil {
		t.Fatalf("the init was never asked: %v", err)
	}
}

// serveLater makes waking id run ready and then, after delay, start the
// test app on port (as a service coming up after its sandbox); the
// channel closes once the app listens.
func serveLater(t testing.TB, waker *gateWaker, id string, ready func(), port int, delay time.Duration) <-chan struct{} {
	t.Helper()
	up := make(chan struct{})
	var once sync.Once
	waker.mu.Lock()
	defer waker.mu.Unlock()
	waker.ready[id] = func() {
		ready()
		once.Do(func() {
			go func() {
				defer close(up)
				time.Sleep(delay)
				ln, err := listenOn("::1", port)
				if err != nil {
					t.Error(err)
					return
				}
				app := &http.Server{Handler: newTestApp(), ReadHeaderTimeout: 10 * time.Second}
				done := make(chan struct{})
				go func() { defer close(done); _ = app.Serve(ln) }()
				t.Cleanup(func() { _ = app.Close(); <-done })
			}()
		})
	}
	return up
}

// TestPortWithoutServiceFailsFast: a woken sandbox whose port nothing
// listens on and no service declares answers at once with the problem,
// not after the wake timeout.
func TestPortWithoutServiceFailsFast(t *testing.T) {
	t.Parallel()
	closed := freePort(t)
	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker, wakeTimeout: time.Hour})
	ready := asleep(t, e, "empty", "sbx-a", "acct-a", closed)
	waker.ready["sbx-a"] = func() { e.res.set("empty", ready) }
	resp, body := e.get("empty", "/", "Authorization", "Bearer "+tokenA)
	if resp.StatusCode != 502 || problemCode(t, body) != "upstream_unreachable" || !strings.Contains(body, fmt.Sprintf("port %d", closed)) {
		t.Fatalf("woken port with nothing on it: %d %s", resp.StatusCode, body)
	}
}

// startOIDC runs a mock OIDC provider for the test.
func startOIDC(t *testing.T) (*mockoidc.MockOIDC, *preview.OIDCConfig) {
	t.Helper()
	m, err := mockoidc.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	c := m.Config()
	return m, &preview.OIDCConfig{Issuer: c.Issuer, ClientID: c.ClientID, ClientSecret: c.ClientSecret}
}

// waitText waits for the tab's page to show want, across the page
// navigating by itself meanwhile.
func waitText(t *testing.T, ctx context.Context, want string, limit time.Duration) {
	t.Helper()
	var body string
	if waitfor.Try(t, limit, func() bool {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, _ = chromedp.Run(tctx, chromedp.Text("body"))
		return strings.Contains(body, want)
	}) {
		return
	}
	t.Fatalf("the page never showed %q; it shows %q", want, body)
}

// TestNavigationToStartingPortGetsWakingPage: a browser opening a ready
// sandbox whose declared service is still starting (as every tab but the
// first does when several open a suspended preview at once: the wake has
// made the route ready, the port not yet answering) gets the waking page,
// which follows the wake and lands on the app, on either relay; not a
// dead-end "did not come up in time" page with no refresh, which the lean
// relay once gave.
func TestNavigationToStartingPortGetsWakingPage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		reverseProxy bool
	}{{"lean relay", false}, {"reverse proxy", true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			appPort := freePort(t)
			e := newEnv(t, newTestApp(), envOptions{reverseProxy: tc.reverseProxy, wakeTimeout: time.Minute,
				sshdConfig: initStatus(t, initproto.Status{Service: initproto.Service{Name: "web", Command: "x", Port: appPort}, State: "starting"})})
			e.expose("starting", "sbx-a", "acct-a", false, false)
			rt, _ := e.res.Resolve(t.Context(), "starting")
			rt.Port = appPort
			e.res.set("starting", rt)
			// With no wake running, an API client is told at once to
			// retry, with the service named.
			resp, body := e.get("starting", "/", "Authorization", "Bearer "+tokenA)
			if resp.StatusCode != http.StatusServiceUnavailable || problemCode(t, body) != "sandbox_waking" ||
				resp.Header.Get("Retry-After") == "" || !strings.Contains(body, "service web is starting") {
				t.Fatalf("API client to a port whose service is starting: %d %s", resp.StatusCode, body)
			}
			resp, body = e.get("starting", "/", "Authorization", "Bearer "+tokenA,
				"Sec-Fetch-Mode", "navigate", "Sec-Fetch-Dest", "document", "Sec-Fetch-Site", "none", "Accept", "text/html")
			if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "Waking up your sandbox") ||
				!strings.Contains(body, "wake-status") {
				t.Fatalf("navigation to a port whose service is starting: %d %q, want the waking page", resp.StatusCode, body)
			}
		})
	}
}

// TestAPIClientsHeldWhileWakeWaitsForPort: once a wake has made the
// sandbox ready, its route is ready while the service's port does not
// answer yet. An API client arriving then is held on the wake like the
// one that started it, and answered by the app; it once got 503
// sandbox_waking at once (11 of 12 concurrent curls in a trial).
func TestAPIClientsHeldWhileWakeWaitsForPort(t *testing.T) {
	t.Parallel()
	appPort := freePort(t)
	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker, wakeTimeout: time.Minute,
		sshdConfig: initStatus(t, initproto.Status{Service: initproto.Service{Name: "web", Command: "x", Port: appPort}, State: "starting"})})
	ready := asleep(t, e, "crowd", "sbx-a", "acct-a", appPort)
	appUp := serveLater(t, waker, "sbx-a", func() { e.res.set("crowd", ready) }, appPort, 2*time.Second)
	first := make(chan string, 1)
	go func() {
		resp, body := e.get("crowd", "/api", "Authorization", "Bearer "+tokenA)
		first <- fmt.Sprintf("%d %s", resp.StatusCode, body)
	}()
	// Wait until the wake has the sandbox ready and is waiting for the
	// port, as the status endpoint says.
	var status string
	if !waitfor.Try(t, 10*time.Second, func() bool {
		_, status = e.get("crowd", "/__sbx_preview/wake-status", "Authorization", "Bearer "+tokenA)
		var st struct{ Step string }
		_ = json.Unmarshal([]byte(status), &st)
		return st.Step == "starting_service" || st.Step == "waiting_for_port"
	}) {
		t.Fatalf("the wake never reached the port; status %s", status)
	}
	select {
	case <-appUp:
		t.Fatal("the app came up before the second client asked; the test proves nothing")
	default:
	}
	resp, body := e.get("crowd", "/api", "Authorization", "Bearer "+tokenA)
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from the sandbox") {
		t.Fatalf("API client arriving while the wake waits for the port: %d %q, want the app's answer", resp.StatusCode, body)
	}
	if got := <-first; !strings.HasPrefix(got, "200 ") {
		t.Fatalf("the client that started the wake: %s", got)
	}
}

// countingListener counts the connections its server accepted.
type countingListener struct {
	net.Listener
	mu sync.Mutex
	n  int
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.mu.Lock()
		l.n++
		l.mu.Unlock()
	}
	return c, err
}

func (l *countingListener) accepted() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// TestWakeHandsItsProbeToTheRequest: the connection with which a wake
// found the port open carries the held request, so a wake opens one
// connection to the app, not a probe and then another (a second connect
// and forwarder handshake on every wake).
func TestWakeHandsItsProbeToTheRequest(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	app := &http.Server{Handler: newTestApp(), ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = app.Serve(cl) }()
	t.Cleanup(func() { _ = app.Close(); <-done })

	waker := &gateWaker{ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{waker: waker})
	if e.cfg.DisableLeanRelay {
		t.Skip("httputil.ReverseProxy dials its own connections; the probe is pooled for the lean relay")
	}
	ready := asleep(t, e, "probe", "sbx-a", "acct-a", ln.Addr().(*net.TCPAddr).Port)
	waker.ready["sbx-a"] = func() { e.res.set("probe", ready) }
	resp, body := e.get("probe", "/api", "Authorization", "Bearer "+tokenA)
	if resp.StatusCode != 200 || !strings.Contains(body, "hello from the sandbox") {
		t.Fatalf("woken request: %d %q, want the app's answer", resp.StatusCode, body)
	}
	if n := cl.accepted(); n != 1 {
		t.Fatalf("the app accepted %d connections for one woken request, want 1 (the wake's probe)", n)
	}
}
