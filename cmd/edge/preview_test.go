package main

import (
	"context"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/oauth2-proxy/mockoidc"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/controltest"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

func reservePort(t *testing.T) int {
	t.Helper()
	n, _ := strconv.Atoi(sshscenario.FreePort(t))
	return n
}

// previewStack is control (internal API, members file, Redis) and
// cmd/edge with the preview proxy, as deployed.
type previewStack struct {
	*stack
	previewPort int
	oidc        *mockoidc.MockOIDC
	members     string // the members file; alice of the dev account is in it
	keyFile     string // the edges' shared session key
	log         *slog.Logger
}

// startPreviewStack runs previews as deployed: control with its internal
// API and members file, cmd/edge with the proxy (plain HTTP, as behind a
// TLS-terminating balancer) signing people in through a real OIDC
// provider, Redis carrying activity and invalidations between them.
func startPreviewStack(t *testing.T) *previewStack {
	t.Helper()
	dir := t.TempDir()
	oidc, members := wstest.MemberOIDC(t, dir, devseed.AccountID)
	keyFile := filepath.Join(dir, "session.key")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	previewPort := reservePort(t)
	log := slog.New(slog.NewTextHandler(testLog{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.Background())
	svc, tok := controltest.Start(t, control.Config{
		DataDir:      filepath.Join(dir, "control"),
		InternalAddr: "127.0.0.1:0", InternalSecret: testSecret, SSHHost: "127.0.0.1", SSHPort: 22,
		PreviewDomain: "preview.localhost", PreviewScheme: "http", PreviewPort: previewPort, PreviewMembersFile: members,
		// Redis carries activity and preview invalidations between the two.
		RedisURL: "redis://127.0.0.1:6379/0", RedisPrefix: "sbxtest:edgepreview:" + strconv.FormatInt(time.Now().UnixNano(), 36) + ":",
		Logger: log.With("side", "control"),
	})
	ps := &previewStack{stack: &stack{api: svc.URL(), token: tok, dir: dir, svc: svc}, previewPort: previewPort, oidc: oidc, members: members,
		keyFile: keyFile, log: log}
	ps.startEdge(t, ctx, cancel, previewPort, "edge")
	return ps
}

// startEdge runs one more cmd/edge replica against the stack's control
// and Redis, its preview proxy on previewPort; dir names its host keys.
func (ps *previewStack) startEdge(t *testing.T, ctx context.Context, cancel context.CancelFunc, previewPort int, dir string) {
	t.Helper()
	svc, oidc, keyFile, log := ps.svc, ps.oidc, ps.keyFile, ps.log
	cfg, _, err := parseConfig([]string{
		"--ssh-addr", "127.0.0.1:0", "--http-addr", "", "--metrics-addr", "", "--control-url", svc.InternalURL(),
		"--host-key-dir", filepath.Join(ps.dir, dir+"-hostkeys"), "--ca-key-file", filepath.Join(ps.dir, "control", "keys", "user_ca"),
		"--ssh-drain", "1s",
		"--preview-addr", "127.0.0.1:" + strconv.Itoa(previewPort), "--preview-plain-http", "--preview-domain", "preview.localhost",
		"--preview-public-port", strconv.Itoa(previewPort), "--oidc-issuer", oidc.Issuer(), "--oidc-client-id", oidc.ClientID,
		"--preview-session-key-file", keyFile, "--redis-url", "redis://127.0.0.1:6379/0",
		// Only control's invalidation can end a route within this test.
		"--preview-route-ttl", "1h",
	}, func(k string) string {
		return map[string]string{"SBX_INTERNAL_SECRET": testSecret, "SBX_OIDC_CLIENT_SECRET": oidc.ClientSecret}[k]
	})
	if err != nil {
		t.Fatal(err)
	}
	runEdge(t, ctx, cancel, cfg, log)
}

// TestPreviewSplitDeployment: a dev server bound to 127.0.0.1 in a
// sandbox, served through cmd/edge to curl and a signed-in browser.
func TestPreviewSplitDeployment(t *testing.T) {
	sshscenario.Require(t, "python3", "python3")
	ps := startPreviewStack(t)
	s, oidc, previewPort, tok := ps.stack, ps.oidc, ps.previewPort, ps.token
	id := s.readySandbox(t)

	port := reservePort(t)
	var ex struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{
		"command": "mkdir -p site && echo '<h1 id=\"msg\">split deployment</h1>' > site/index.html && " +
			"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(port) + " >/dev/null 2>&1 & } && echo $!",
	}, &ex); code != 200 || ex.ExitCode != 0 {
		t.Fatalf("start dev server: %d %+v", code, ex)
	}
	if pid, err := strconv.Atoi(strings.TrimSpace(ex.Stdout)); err == nil {
		t.Cleanup(func() {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		})
	}
	var pv struct{ URL string }
	if code := s.call(t, "POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	curl := func(args ...string) string {
		out, _ := exec.Command("curl", append([]string{"-sS", "--max-time", "10", "--connect-to", "::127.0.0.1:" + strconv.Itoa(previewPort), "-w", "\n%{http_code}"}, args...)...).CombinedOutput()
		return string(out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for out := ""; !strings.HasSuffix(out, "\n200"); out = curl("-H", "Authorization: Bearer "+tok, pv.URL+"/") {
		if time.Now().After(deadline) {
			t.Fatalf("preview through cmd/edge never answered 200: %q", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if out := curl("-H", "Authorization: Bearer sbx_at_"+strings.Repeat("A", 43), pv.URL+"/"); !strings.HasSuffix(out, "\n401") {
		t.Errorf("unknown token through control: %q, want 401", out)
	}

	// The production edge has no dev sign-in: its login goes to the
	// provider, and the dev form's endpoint does not exist.
	apex := "http://preview.localhost:" + strconv.Itoa(previewPort)
	if out := curl("-o", "/dev/null", "-w", "%{redirect_url}", apex+"/login?rd="+url.QueryEscape(pv.URL+"/")); !strings.HasPrefix(out, oidc.Issuer()) {
		t.Errorf("edge login: %q, want a redirect to the provider %s", out, oidc.Issuer())
	}
	if out := curl("-X", "POST", "-d", "state=x", apex+"/dev-login"); !strings.HasSuffix(out, "\n404") || !strings.Contains(out, "preview_not_found") {
		t.Errorf("POST /dev-login on the edge: %q, want 404 preview_not_found", out)
	}

	// alice is a member by the operator's file; the browser signs in
	// through the provider and lands on the page.
	oidc.QueueUser(&mockoidc.MockUser{Subject: "alice", Email: "alice@example.com", EmailVerified: true})
	bctx := chromiumtest.New(t, 90*time.Second)
	if err := chromedp.Do(bctx, chromedp.Navigate(pv.URL+"/index.html"), chromedp.WaitVisible("#msg")); err != nil {
		t.Fatalf("browser login through cmd/edge: %v", err)
	}
	// mallory is a real user of the provider but in no account.
	oidc.QueueUser(&mockoidc.MockUser{Subject: "mallory", Email: "mallory@example.com", EmailVerified: true})
	mctx := chromiumtest.New(t, 60*time.Second)
	if err := chromedp.Do(mctx, chromedp.Navigate(pv.URL+"/index.html")); err != nil {
		t.Fatal(err)
	}
	if body, _ := chromedp.Run(mctx, chromedp.Text("body")); !strings.Contains(body, "preview_forbidden") {
		t.Errorf("mallory: %q, want preview_forbidden", body)
	}

	// Removed: control publishes the label, the edge drops it (its cache
	// would otherwise hold the route for an hour).
	if code := s.call(t, "DELETE", "/api/v1/sandboxes/"+id+"/ports/"+strconv.Itoa(port), nil, nil); code != 204 {
		t.Fatalf("DELETE port: %d", code)
	}
	deadline = time.Now().Add(8 * time.Second)
	for out := ""; !strings.HasSuffix(out, "\n404"); out = curl("-H", "Authorization: Bearer "+tok, pv.URL+"/") {
		if time.Now().After(deadline) {
			t.Fatalf("deleted port still served: %q", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestPreviewConfigRefusesWithoutIssuer(t *testing.T) {
	t.Parallel()
	_, _, err := parseConfig([]string{"--control-url", "http://c", "--host-key-dir", "d", "--ca-key-file", "k",
		"--preview-addr", ":443", "--preview-domain", "sbx-preview.dev"},
		func(k string) string { return map[string]string{"SBX_INTERNAL_SECRET": testSecret}[k] })
	if err == nil || !strings.Contains(err.Error(), "--oidc-issuer") || !strings.Contains(err.Error(), "--redis-url") {
		t.Errorf("preview without issuer, key or Redis: %v, want errors naming --oidc-issuer and --redis-url", err)
	}
}

// TestPreviewDNS01Config: a DNS-01 server without its TSIG key, or with
// plain HTTP, is refused; with the key from a file it configures the
// wildcard path.
func TestPreviewDNS01Config(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keyFile, secretFile := filepath.Join(dir, "session.key"), filepath.Join(dir, "tsig")
	if err := os.WriteFile(keyFile, []byte(strings.Repeat("k", 40)), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(secretFile, []byte("c2VjcmV0\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--control-url", "http://c", "--host-key-dir", "d", "--ca-key-file", "k",
		"--preview-addr", ":443", "--preview-domain", "sbx-preview.dev", "--oidc-issuer", "https://id.example", "--oidc-client-id", "c",
		"--preview-session-key-file", keyFile, "--redis-url", "redis://127.0.0.1:6379/0", "--acme-dns-server", "ns1.example:53"}
	env := func(k string) string { return map[string]string{"SBX_INTERNAL_SECRET": testSecret}[k] }
	if _, _, err := parseConfig(base, env); err == nil || !strings.Contains(err.Error(), "--acme-dns-server") {
		t.Errorf("DNS-01 without a TSIG key: %v, want refused", err)
	}
	if _, _, err := parseConfig(append(base, "--acme-dns-tsig-key", "edge.", "--acme-dns-tsig-secret-file", secretFile, "--preview-plain-http"), env); err == nil || !strings.Contains(err.Error(), "--preview-plain-http") {
		t.Errorf("DNS-01 with plain HTTP: %v, want refused", err)
	}
	if _, _, err := parseConfig(append(base, "--acme-dns-tsig-key", "edge.", "--acme-dns-tsig-secret-file", secretFile, "--acme-dns-tsig-algorithm", "hmac-md5"), env); err == nil {
		t.Error("DNS-01 with hmac-md5: accepted, want refused")
	}
	cfg, _, err := parseConfig(append(base, "--acme-dns-tsig-key", "edge.", "--acme-dns-tsig-secret-file", secretFile), env)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Preview.DNS01; d.Server != "ns1.example:53" || d.KeyName != "edge." || d.Secret != "c2VjcmV0" || d.KeyAlgorithm != "hmac-sha256" {
		t.Errorf("DNS-01 config %+v", d)
	}
}
