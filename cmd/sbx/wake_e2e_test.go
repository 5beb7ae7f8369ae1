package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// devServerScript is a Python dev server as people run them: it takes a
// moment to boot (a bundler warming up), then serves HTML on "localhost",
// here the IPv6 loopback only, as Node 17+ and Vite often pick.
const devServerScript = `
import http.server, socket, sys, time
print("dev server booting", flush=True)
time.sleep(1.5)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"<!doctype html><html><body><h1 id=app>` + devServerApp + `</h1></body></html>"
        self.send_response(200); self.send_header("Content-Type", "text/html"); self.send_header("Content-Length", str(len(b))); self.end_headers(); self.wfile.write(b)
    def log_message(self, *a): pass
class S(http.server.ThreadingHTTPServer):
    address_family = socket.AF_INET6
print("dev server listening on [::1]:" + sys.argv[1], flush=True)
S(("::1", int(sys.argv[1])), H).serve_forever()
`

// devServerApp is the text of devServerScript's page.
const devServerApp = "hello from the dev server"

type serviceView struct {
	Name     string `json:"name"`
	State    string `json:"state"`
	ExitCode *int   `json:"exit_code"`
	Starts   int    `json:"starts"`
}

func (p *devProc) serviceList(id string) map[string]serviceView {
	p.t.Helper()
	var out struct{ Services []serviceView }
	if code := p.call("GET", "/api/v1/sandboxes/"+id+"/services", nil, &out); code != 200 {
		p.t.Fatalf("list services: %d", code)
	}
	m := map[string]serviceView{}
	for _, s := range out.Services {
		m[s.Name] = s
	}
	return m
}

func (p *devProc) waitService(id, name, what string, cond func(serviceView) bool) serviceView {
	p.t.Helper()
	var last serviceView
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if last = p.serviceList(id)[name]; cond(last) {
			return last
		}
	}
	p.t.Fatalf("service %s never %s; last %+v", name, what, last)
	return last
}

// rawGet is GET with the account token, returning the body as text.
func (p *devProc) rawGet(path string) (int, string) {
	p.t.Helper()
	req, _ := http.NewRequest("GET", p.API+path, nil)
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// timedGet fetches rawURL through the preview with the token (and any
// further headers, "Name: value") and returns curl's time to the first
// byte of the answer.
func (p *devProc) timedGet(rawURL string, headers ...string) (code int, ttfb time.Duration, body string) {
	p.t.Helper()
	u, _ := url.Parse(rawURL)
	args := []string{"-sS", "--max-time", "90", "--connect-to", "::127.0.0.1:" + u.Port(),
		"-H", "Authorization: Bearer " + p.Token, "-w", "\n%{http_code} %{time_starttransfer}"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	out, err := exec.Command("curl", append(args, rawURL)...).Output()
	if err != nil {
		p.t.Fatalf("curl %s: %v", rawURL, err)
	}
	s := string(out)
	i := strings.LastIndex(s, "\n")
	var secs float64
	fmt.Sscanf(s[i+1:], "%d %f", &code, &secs)
	return code, time.Duration(secs * float64(time.Second)), s[:i]
}

// wakeDoc is one document a browser loaded: its status, the waking
// page's step (none for the app) and the page.
type wakeDoc struct {
	code       int
	step, body string
}

// dataStep is the waking page's step, or an error page's code.
var dataStep = regexp.MustCompile(`data-(?:step|code)="([a-z_]*)"`)

// browserWake navigates to rawURL through the preview as a browser does
// (Accept: text/html); on the waking page it does what the page's
// script does, polling the wake status until ready and then reloading,
// until the page holds app. It returns every document loaded.
func (p *devProc) browserWake(rawURL, app string) []wakeDoc {
	p.t.Helper()
	u, _ := url.Parse(rawURL)
	status := u.Scheme + "://" + u.Host + "/__sbx_preview/wake-status"
	var docs []wakeDoc
	for end := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, _, body := p.timedGet(rawURL, "Accept: text/html")
		d := wakeDoc{code: code, body: body}
		if m := dataStep.FindStringSubmatch(body); m != nil {
			d.step = m[1]
		}
		docs = append(docs, d)
		if code == 200 && strings.Contains(body, app) {
			return docs
		}
		for time.Now().Before(end) {
			if _, _, st := p.timedGet(status); strings.Contains(st, `"ready":true`) {
				break
			}
			time.Sleep(400 * time.Millisecond)
		}
		if time.Now().After(end) {
			p.t.Fatalf("%s never showed the app; last document %d:\n%s", rawURL, code, body)
		}
	}
}

type wakeSteps struct {
	Steps []struct {
		Step    string `json:"step"`
		Service string `json:"service"`
		AtMS    int64  `json:"at_ms"`
	} `json:"steps"`
	ElapsedMS int64 `json:"elapsed_ms"`
}

// TestWakeToAppEndToEnd is the must-show on a real `sbx dev`: a
// Python dev server declared as a service with its port, opened in
// headless Chromium; the sandbox suspends while idle; a reload shows the
// waking page step by step and then the app, with no 502 in between; the
// service's logs show two starts. A crashing service is restarted with
// its exit code in the API. Screenshots go to the artifact directory.
func TestWakeToAppEndToEnd(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 is required (apt-get install python3)")
	}
	p := startDev(t, t.TempDir(), "", "--idle-timeout", "6s")
	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	var sb sbView
	code := p.call("POST", "/api/v1/sandboxes", map[string]any{
		"profile": "tuist-linux-small",
		"services": []map[string]any{{
			"name": "web", "command": "python3", "args": []string{"-c", devServerScript, strconv.Itoa(port)}, "port": port,
		}},
	}, &sb)
	if code != 201 {
		t.Fatalf("create with a service: %d", code)
	}
	id := sb.ID
	p.waitStatus(id, "ready", 30*time.Second)
	var pv portView
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	p.waitService(id, "web", "running", func(s serviceView) bool { return s.State == "running" })

	// The figure's baseline: the same page on a ready sandbox.
	var ready []time.Duration
	for range 5 {
		code, ttfb, body := p.timedGet(pv.URL + "/")
		if code != 200 || !strings.Contains(body, "hello from the dev server") {
			t.Fatalf("ready preview: %d %q", code, body)
		}
		ready = append(ready, ttfb)
	}

	dir := chromiumtest.ArtifactDir(t)
	ctx := chromiumtest.New(t, 3*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(900, 640)); err != nil {
		t.Fatal(err)
	}
	documents, resetDocuments := chromiumtest.Documents(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(pv.URL+"/"), chromedp.Click("#signin"), chromedp.WaitVisible("#app")); err != nil {
		t.Fatalf("sign in and open the app: %v", err)
	}

	// Idle: the sandbox is suspended, which ends every process in it.
	p.waitStatus(id, "suspended", 60*time.Second)
	resetDocuments()
	wakeStart := time.Now()
	if err := chromedp.Do(ctx, chromedp.Reload()); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// Mid-wake: the page names the sandbox, the port and the step.
	seen := map[string]bool{}
	shot := false
	for end := time.Now().Add(60 * time.Second); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		step, _ := chromedp.Run(tctx, chromedp.Evaluate[string](`(document.querySelector("main[data-step]")||{}).getAttribute ? document.querySelector("main[data-step]").getAttribute("data-step") : (document.getElementById("app") ? "app" : "")`))
		var body string
		if step != "" && step != "app" {
			body, _ = chromedp.Run(tctx, chromedp.Text("body"))
		}
		cancel()
		if step == "" {
			continue
		}
		seen[step] = true
		if step == "app" {
			break
		}
		if !shot && (step == "starting_service" || step == "waiting_for_port" || step == "restoring") {
			if !strings.Contains(body, id) || !strings.Contains(body, strconv.Itoa(port)) || strings.Contains(body, "Service Unavailable") {
				t.Errorf("waking page %q: want the sandbox %s and port %d named, and no Service Unavailable", body, id, port)
			}
			chromiumtest.Screenshot(t, ctx, dir, "e2e-waking-"+step)
			shot = true
		}
	}
	if !seen["app"] {
		t.Fatalf("the reload never reached the app (steps seen %v)", seen)
	}
	if !shot {
		t.Errorf("the waking page was never shown (steps seen %v)", seen)
	}
	appAfter := time.Since(wakeStart)
	loaded := documents()
	for _, d := range loaded {
		if !strings.HasPrefix(d, "200 ") && !strings.HasPrefix(d, "503 ") {
			t.Errorf("document %s on the way from the waking page to the app (all: %q)", d, loaded)
		}
	}
	if n := len(loaded); n == 0 || !strings.HasPrefix(loaded[n-1], "200 ") {
		t.Errorf("documents %q, want the app's 200 last", loaded)
	}
	chromiumtest.Screenshot(t, ctx, dir, "e2e-app-after-wake")

	// What the status endpoint recorded of that wake.
	var st wakeSteps
	u, _ := url.Parse(pv.URL)
	out, err := exec.Command("curl", "-sS", "--max-time", "10", "--connect-to", "::127.0.0.1:"+u.Port(),
		"-H", "Authorization: Bearer "+p.Token, pv.URL+"/__sbx_preview/wake-status").Output()
	if err != nil || json.Unmarshal(out, &st) != nil {
		t.Fatalf("wake status: %s %v", out, err)
	}
	var names []string
	for _, s := range st.Steps {
		names = append(names, s.Step+"@"+strconv.FormatInt(s.AtMS, 10)+"ms")
	}
	t.Logf("browser wake: steps %s; app shown %s after the reload", strings.Join(names, " -> "), appAfter.Round(time.Millisecond))
	if len(st.Steps) < 3 || st.Steps[0].Step != "restoring" || st.Steps[len(st.Steps)-1].Step != "ready" || !strings.Contains(strings.Join(names, " "), "starting_service") {
		t.Errorf("wake steps %v: want restoring, starting_service, ..., ready", names)
	}

	// The service started twice, before and after the suspend.
	code, logs := p.rawGet("/api/v1/sandboxes/" + id + "/services/web/logs")
	if code != 200 || strings.Count(logs, "sbx-init: starting web") != 2 || strings.Count(logs, "\ndev server listening on") != 2 {
		t.Errorf("service logs (%d) show %d starts, want 2:\n%s", code, strings.Count(logs, "sbx-init: starting web"), logs)
	}

	// The figure: suspended -> first byte of the app's HTML for an API
	// client (held until the port answers), split by the edge's steps,
	// against the ready page above.
	p.waitStatus(id, "suspended", 60*time.Second)
	code, ttfb, body := p.timedGet(pv.URL + "/")
	if code != 200 || !strings.Contains(body, "hello from the dev server") {
		t.Fatalf("API client on a suspended preview: %d %q, want the app (held until the port answered)", code, body)
	}
	out, _ = exec.Command("curl", "-sS", "--max-time", "10", "--connect-to", "::127.0.0.1:"+u.Port(),
		"-H", "Authorization: Bearer "+p.Token, pv.URL+"/__sbx_preview/wake-status").Output()
	st = wakeSteps{}
	_ = json.Unmarshal(out, &st)
	split := map[string]int64{}
	for i, s := range st.Steps {
		if i+1 < len(st.Steps) {
			split[s.Step] += st.Steps[i+1].AtMS - s.AtMS
		}
	}
	t.Logf("FIGURE ready page TTFB: %v (5 runs)", ready)
	t.Logf("FIGURE suspended -> first byte of HTML: %s; restore %d ms, service start %d ms, port wait %d ms (edge steps %s)",
		ttfb.Round(time.Millisecond), split["restoring"], split["starting_service"], split["waiting_for_port"], out)

	// A crashing service: restarted with backoff, its exit code visible.
	if code := p.call("PUT", "/api/v1/sandboxes/"+id+"/services/crashy", map[string]any{"command": "echo about to fail; exit 3"}, nil); code != 200 {
		t.Fatalf("PUT crashy: %d", code)
	}
	s := p.waitService(id, "crashy", "restarted after exiting 3", func(s serviceView) bool {
		return s.Starts >= 3 && s.ExitCode != nil && *s.ExitCode == 3
	})
	_, logs = p.rawGet("/api/v1/sandboxes/" + id + "/services/crashy/logs")
	t.Logf("crashy: %+v (exit code %d); logs:\n%s", s, *s.ExitCode, logs)
	if !strings.Contains(logs, "exited with code 3; restarting in 500ms") || !strings.Contains(logs, "exited with code 3; restarting in 1s") {
		t.Errorf("crashy's logs do not show the backoff growing:\n%s", logs)
	}
}
