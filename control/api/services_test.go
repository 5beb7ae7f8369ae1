package api_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
)

type serviceDoc struct {
	Name        string     `json:"name"`
	State       string     `json:"state"`
	ExitCode    *int       `json:"exit_code"`
	Starts      int        `json:"starts"`
	Port        *int       `json:"port"`
	LastStartAt *time.Time `json:"last_start_at"`
}

func (e *env) services(t *testing.T, id string) map[string]serviceDoc {
	t.Helper()
	code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/services", nil)
	if code != 200 {
		t.Fatalf("list services: %d %s", code, b)
	}
	var out struct{ Services []serviceDoc }
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	m := map[string]serviceDoc{}
	for _, s := range out.Services {
		m[s.Name] = s
	}
	return m
}

func (e *env) waitService(t *testing.T, id, name, what string, cond func(serviceDoc) bool) serviceDoc {
	t.Helper()
	var last serviceDoc
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if last = e.services(t, id)[name]; cond(last) {
			return last
		}
	}
	t.Fatalf("service %s never %s; last %+v", name, what, last)
	return last
}

// TestServicesLifecycle: services declared at create start when the
// sandbox is ready; a crashing one is restarted with its exit code
// visible; after a suspend and a wake they run again, and their logs
// show every start. The same on both of the local provider's servers:
// the embedded one, and OpenSSH's sshd running the real sbx-init for the
// init's subsystem.
func TestServicesLifecycle(t *testing.T) {
	for _, mode := range []string{local.ModeEmbedded, local.ModeSSHD} {
		t.Run(mode, func(t *testing.T) {
			opt := func(c *control.Config) { c.Provider = standalone.Local{Mode: mode} }
			if mode == local.ModeSSHD {
				bin := inittest.Build(t)
				opt = func(c *control.Config) { c.Provider = standalone.Local{Mode: mode, InitPath: bin} }
			}
			testServicesLifecycle(t, newEnv(t, "sqlite", false, opt))
		})
	}
}

func testServicesLifecycle(t *testing.T, e *env) {
	code, _, b := e.do("dev", "POST", "/api/v1/sandboxes", jsonBody(map[string]any{
		"profile":  "tuist-linux-small",
		"services": []map[string]any{{"name": "ticker", "command": "echo tick from $SBX_SERVICE; sleep 600"}},
	}))
	if code != 201 {
		t.Fatalf("create with services: %d %s", code, b)
	}
	var sb struct{ ID string }
	_ = json.Unmarshal(b, &sb)
	id := sb.ID
	e.waitService(t, id, "ticker", "running", func(s serviceDoc) bool { return s.State == "running" && s.Starts == 1 })

	// A service with a port is running once the port answers.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	code, _, b = e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/web", jsonBody(map[string]any{
		"command": `exec python3 -m http.server "$PORT" --bind 127.0.0.1`, "port": port,
	}))
	if code != 200 {
		t.Fatalf("put web: %d %s", code, b)
	}
	web := e.waitService(t, id, "web", "running", func(s serviceDoc) bool { return s.State == "running" })
	if web.Port == nil || *web.Port != port || web.Starts != 1 {
		t.Errorf("web = %+v, want one start on port %d", web, port)
	}
	if resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/", port)); err != nil || resp.StatusCode != 200 {
		t.Errorf("web's port: %v %v, want 200", resp, err)
	} else {
		resp.Body.Close()
	}

	// A crashing service: restarted, its exit code in the API.
	code, _, b = e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/crash", jsonBody(map[string]any{
		"command": "sh", "args": []string{"-c", "exit 7"},
	}))
	if code != 200 {
		t.Fatalf("put crash: %d %s", code, b)
	}
	e.waitService(t, id, "crash", "restarted with exit code 7", func(s serviceDoc) bool {
		return s.Starts >= 2 && s.ExitCode != nil && *s.ExitCode == 7 && (s.State == "restarting" || s.State == "running")
	})
	// A misspelt name is told the declared ones.
	if code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/services/crsh", nil); code != 404 ||
		!strings.Contains(string(b), `no service named \"crsh\"; its services: crash, ticker, web`) {
		t.Fatalf("get a misspelt service: %d %s, want service_not_found naming crash, ticker and web", code, b)
	}
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+id+"/services/crash", nil); code != 204 {
		t.Fatalf("delete crash: %d %s", code, b)
	}
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+id+"/services/crash", nil); code != 404 || !strings.Contains(string(b), "service_not_found") {
		t.Fatalf("delete again: %d %s", code, b)
	}

	// Bad declarations name the field.
	for _, body := range []map[string]any{{"command": ""}, {"command": "x", "port": 70000}, {"command": "x", "cwd": "../etc"}} {
		if code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/bad", jsonBody(body)); code != 422 {
			t.Errorf("PUT %v: %d %s, want 422", body, code, b)
		}
	}
	if code, _, _ := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/services/Bad%20Name", jsonBody(map[string]any{"command": "x"})); code != 422 {
		t.Errorf("PUT with a bad name: %d, want 422", code)
	}
	if code, _, _ := e.do("other", "GET", "/api/v1/sandboxes/"+id+"/services", nil); code != 404 {
		t.Errorf("another account lists services: %d, want 404", code)
	}

	e.suspend(t, id)
	if s := e.services(t, id)["ticker"]; s.State != "stopped" {
		t.Errorf("suspended sandbox's service: %+v, want stopped", s)
	}
	if code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/services/ticker/logs", nil); code != 409 {
		t.Errorf("logs of a suspended sandbox: %d %s, want 409", code, b)
	}
	// An exec wakes it; the service starts again with the restore.
	if code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", jsonBody(map[string]any{"command": "true"})); code != 200 {
		t.Fatalf("exec to wake: %d %s", code, b)
	}
	e.waitService(t, id, "ticker", "running after the wake", func(s serviceDoc) bool { return s.State == "running" })
	e.waitService(t, id, "web", "answering on its port after the wake", func(s serviceDoc) bool { return s.State == "running" })
	code, hdr, b := e.do("dev", "GET", "/api/v1/sandboxes/"+id+"/services/ticker/logs?tail=50", nil)
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") {
		t.Fatalf("logs: %d %s", code, b)
	}
	if n := strings.Count(string(b), "sbx-init: starting ticker"); n != 2 || strings.Count(string(b), "tick from ticker") != 2 {
		t.Errorf("logs after one wake show %d starts, want 2:\n%s", n, b)
	}

	// Followed logs: the tail, then new lines, as server-sent events.
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.svc.URL()+"/api/v1/sandboxes/"+id+"/services/ticker/logs?follow=true&tail=1", nil)
	req.Header.Set("Authorization", "Bearer "+e.tokens["dev"])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var data []string
	for sc.Scan() && len(data) < 1 {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			data = append(data, d)
		}
	}
	if len(data) != 1 || !strings.Contains(data[0], `"text":"tick from ticker"`) {
		t.Errorf("followed events %q", data)
	}
}
