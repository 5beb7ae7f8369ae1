package preview_test

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/testkit/chromiumtest"
)

// crashingInit makes the sandbox's init answer, to a list and to a log
// read alike, with one service on port that has exited with code 1 four
// times in a row, and its last lines.
func crashingInit(t *testing.T, port int) []string {
	t.Helper()
	one := 1
	resp := initproto.Response{
		Services: []initproto.Status{{Service: initproto.Service{Name: "broken", Command: "node server.js", Port: port},
			State: initproto.StateRestarting, ExitCode: &one, Starts: 4, QuickExits: 4}},
		Lines: []initproto.Line{
			{Text: "sbx-init: starting broken: node server.js"},
			{Text: "Error: Cannot find module 'express'"},
			{Text: "sbx-init: broken exited with code 1; restarting in 4s"},
		},
	}
	path := filepath.Join(t.TempDir(), "init.json")
	b, _ := json.Marshal(resp)
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	return []string{"Subsystem " + initproto.Subsystem + " read request; cat " + path}
}

// TestCrashLoopingServiceIsNamed: a preview whose declared service keeps
// exiting is not waited on for the whole wake limit. The waking page
// turns, as soon as the supervisor's count says so, into "service
// `broken` keeps exiting (code 1)" with its last log lines and the
// command to read the rest; an API client gets a 502 service_crashing
// problem saying the same, at once, for a waking and for a ready
// sandbox alike.
func TestCrashLoopingServiceIsNamed(t *testing.T) {
	t.Parallel()
	m, cfg := startOIDC(t)
	appPort := freePort(t)
	waker := &gateWaker{gates: map[string]chan struct{}{}, ready: map[string]func(){}}
	e := newEnv(t, newTestApp(), envOptions{oidc: cfg, waker: waker, wakeTimeout: time.Minute, sshdConfig: crashingInit(t, appPort)})
	ready := asleep(t, e, "crashy", "sbx-crashy", "acct-a", appPort)
	waker.ready["sbx-crashy"] = func() { e.res.set("crashy", ready) }

	// An API client to the sleeping preview: held only until the
	// service's count is read, then told why.
	began := time.Now()
	resp, body := e.get("crashy", "/", "Authorization", "Bearer "+tokenA, "Accept", "application/json")
	var pb struct {
		Status int      `json:"status"`
		Code   string   `json:"code"`
		Detail string   `json:"detail"`
		Logs   []string `json:"logs"`
	}
	_ = json.Unmarshal([]byte(body), &pb)
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the API client was held %s (the wake limit is a minute)", took)
	}
	if resp.StatusCode != http.StatusBadGateway || pb.Code != "service_crashing" || pb.Detail != "service `broken` keeps exiting (code 1)" ||
		len(pb.Logs) != 3 || pb.Logs[1] != "Error: Cannot find module 'express'" {
		t.Errorf("API client to the waking preview: %d %s, want 502 service_crashing with the exit code and the log", resp.StatusCode, body)
	}
	// Now ready: a request answered at once, the same truth.
	resp, body = e.get("crashy", "/", "Authorization", "Bearer "+tokenA, "Accept", "application/json")
	if resp.StatusCode != http.StatusBadGateway || !strings.Contains(body, `"code":"service_crashing"`) || !strings.Contains(body, "keeps exiting (code 1)") {
		t.Errorf("API client to the ready preview: %d %s", resp.StatusCode, body)
	}

	// A browser, from asleep again: the waking page gives up with the
	// same words, the log and the commands.
	e.res.set("crashy", preview.Route{SandboxID: "sbx-crashy", AccountID: "acct-a", Port: appPort})
	dir := chromiumtest.ArtifactDir(t)
	ctx := chromiumtest.New(t, 2*time.Minute)
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(900, 720)); err != nil {
		t.Fatal(err)
	}
	m.QueueUser(user("alice"))
	if err := chromedp.Do(ctx, chromedp.Navigate(e.url("crashy", "/"))); err != nil {
		t.Fatal(err)
	}
	// The waking page flips to failed, or (the wake done before the
	// page's patience ran out) the error page is served directly.
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](`document.querySelector('main[data-step="failed"], main[data-code="service_crashing"]')`,
		chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Text("body"))
		t.Fatalf("the page never said the service crashes: %v; it shows %q", err, text)
	}
	text, _ := chromedp.Run(ctx, chromedp.Text("body"))
	for _, want := range []string{"broken keeps exiting (code 1)", "Error: Cannot find module 'express'", "sbx services logs sbx-crashy broken"} {
		if !strings.Contains(text, want) {
			t.Errorf("crash page %q does not show %q", text, want)
		}
	}
	if strings.Contains(text, "`") {
		t.Errorf("crash page shows literal backticks: %q", text)
	}
	chromiumtest.Screenshot(t, ctx, dir, "error-service-crashing")
}
