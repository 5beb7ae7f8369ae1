package main

import (
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

type portView struct {
	Port   int    `json:"port"`
	URL    string `json:"url"`
	Access string `json:"access"`
}

// TestPreviewThroughDev runs a dev server bound to 127.0.0.1 inside a
// sandbox of the real `sbx dev`, exposes it with POST /ports, and reaches
// it with curl (bearer token, HTTP/1.1 and h2c) and with headless Chromium
// through the dev sign-in page.
func TestPreviewThroughDev(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	p := startDev(t, t.TempDir(), "")
	id := createReady(t, p)

	// The dev server: loopback only, as a dev server started by hand is.
	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	var ex execResult
	code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{
		"command": "mkdir -p site && echo '<html><body><h1 id=\"msg\">served from inside the sandbox</h1></body></html>' > site/index.html && " +
			"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(port) + " >/dev/null 2>&1 & } && echo $!",
	}, &ex)
	if code != 200 || ex.ExitCode != 0 {
		t.Fatalf("start dev server: %d %+v", code, ex)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ex.Stdout))
	if err != nil {
		t.Fatalf("dev server pid %q: %v", ex.Stdout, err)
	}
	t.Cleanup(func() {
		if proc, err := os.FindProcess(pid); err == nil {
			_ = proc.Kill()
		}
	})

	var pv portView
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	u, err := url.Parse(pv.URL)
	if err != nil || u.Scheme != "http" || !strings.HasSuffix(u.Hostname(), ".preview.localhost") || u.Port() == "" {
		t.Fatalf("preview url %q: want http://<label>.preview.localhost:<port>", pv.URL)
	}
	connectTo := "::127.0.0.1:" + u.Port()
	curl := func(args ...string) (string, error) {
		out, err := exec.Command("curl", append([]string{"-sS", "--max-time", "10", "--connect-to", connectTo}, args...)...).CombinedOutput()
		return string(out), err
	}
	// Wait for python to listen: until then the proxy answers 502.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := curl("-w", "\n%{http_code}", "-H", "Authorization: Bearer "+p.Token, pv.URL+"/")
		if err == nil && strings.HasSuffix(out, "\n200") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("preview never answered 200: %q %v", out, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, flag := range []string{"--http1.1", "--http2-prior-knowledge"} {
		out, err := curl(flag, "-H", "Authorization: Bearer "+p.Token, pv.URL+"/")
		if err != nil || !strings.Contains(out, "served from inside the sandbox") {
			t.Errorf("curl %s: %q %v", flag, out, err)
		}
	}
	if out, _ := curl("-w", "\n%{http_code}", pv.URL+"/"); !strings.HasSuffix(out, "\n401") {
		t.Errorf("without a token: %q, want 401", out)
	}

	// A browser signs in on the dev page and lands on the page.
	ctx := chromiumtest.New(t, 90*time.Second)
	if err := chromedp.Do(ctx, chromedp.Navigate(pv.URL+"/index.html")); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Click("#signin")); err != nil {
		t.Fatalf("dev sign-in button: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible("#msg")); err != nil {
		t.Fatalf("page after sign-in: %v", err)
	}
	if loc, _ := chromedp.Run(ctx, chromedp.Location()); loc != pv.URL+"/index.html" {
		t.Errorf("landed on %q, want %q", loc, pv.URL+"/index.html")
	}

	// The CLI lists it, exposes another, and unexposes; the URL stops
	// working at once.
	if out := p.cli("ports", id); !strings.Contains(out, pv.URL) || !strings.Contains(out, "private") {
		t.Errorf("sbx ports: %q, want the URL and private", out)
	}
	if out := strings.TrimSpace(p.cli("ports", "--public", id, "4321")); !strings.HasPrefix(out, "http://") || out == pv.URL {
		t.Errorf("sbx ports --public: %q, want a new preview URL", out)
	}
	p.cli("ports", "--rm", id, strconv.Itoa(port))
	if out, _ := curl("-w", "\n%{http_code}", "-H", "Authorization: Bearer "+p.Token, pv.URL+"/"); !strings.HasSuffix(out, "\n404") {
		t.Errorf("after DELETE: %q, want 404", out)
	}
}
