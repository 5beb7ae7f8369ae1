package main

import (
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startDevServer starts python3's http.server inside sandbox id, bound to
// 127.0.0.1:port as a dev server started by hand is, serving a page that
// says marker, and returns its pid (the local provider runs sandboxes on
// this host). It is killed when the test ends.
func (p *devProc) startDevServer(id string, port int, marker string) int {
	p.t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		p.t.Fatal("python3 is required (apt-get install python3)")
	}
	var ex execResult
	code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{
		"command": "mkdir -p site && echo '" + marker + "' > site/index.html && " +
			"{ setsid nohup python3 -m http.server --bind 127.0.0.1 --directory site " + strconv.Itoa(port) + " >/dev/null 2>&1 & } && echo $!",
	}, &ex)
	if code != 200 || ex.ExitCode != 0 {
		p.t.Fatalf("start dev server: %d %+v", code, ex)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(ex.Stdout))
	if err != nil {
		p.t.Fatalf("dev server pid %q: %v", ex.Stdout, err)
	}
	p.t.Cleanup(func() { killProcess(pid) })
	return pid
}

// killProcess kills pid and waits (briefly) until it is gone.
func killProcess(pid int) {
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return
		}
	}
}

// previewGet fetches rawURL through sbx dev's preview proxy with curl and
// the account token (an API client: held while the sandbox wakes).
func (p *devProc) previewGet(rawURL string) (code int, body string) {
	p.t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		p.t.Fatal(err)
	}
	out, err := exec.Command("curl", "-sS", "--max-time", "90", "--connect-to", "::127.0.0.1:"+u.Port(),
		"-H", "Authorization: Bearer "+p.Token, "-w", "\n%{http_code}", rawURL).Output()
	if err != nil {
		p.t.Fatalf("curl %s: %v", rawURL, err)
	}
	s := string(out)
	i := strings.LastIndex(s, "\n")
	code, _ = strconv.Atoi(s[i+1:])
	return code, s[:i]
}

// waitPreview polls rawURL until it answers 200 with want in the body
// (the dev server takes a moment to listen; until then the proxy says 502).
func (p *devProc) waitPreview(rawURL, want string) {
	p.t.Helper()
	for end := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		code, body := p.previewGet(rawURL)
		if code == 200 && strings.Contains(body, want) {
			return
		}
		if time.Now().After(end) {
			p.t.Fatalf("preview %s: %d %q, want 200 with %q", rawURL, code, body, want)
		}
	}
}

// previewWakes is the preview part of TestIdleOffloadEndToEnd: sandbox id
// is ready; a dev server in it is exposed and answers; the sandbox goes
// idle and is suspended; a preview request wakes it.
//
// Suspending releases the pod, and with it every process: the dev server
// does not come back by itself, in Kubernetes or here. What a user gets is
// the wake, then the proxy's plain answer that nothing listens on the port
// (502 upstream_unreachable), not a hang and not a waking page forever; the
// workspace is intact, so restarting the server serves the page again.
// The local provider ends the processes of its sessions but not one that
// left its session with setsid, so the test ends it as a pod release
// would.
func previewWakes(t *testing.T, p *devProc, id string, ledgerOf func() string) {
	t.Helper()
	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	pid := p.startDevServer(id, port, "served before the nap")
	var pv portView
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": port}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	p.waitPreview(pv.URL+"/", "served before the nap")

	p.waitStatus(id, "suspended", 30*time.Second)
	killProcess(pid)
	before := ledgerOf()
	code, body := p.previewGet(pv.URL + "/")
	if code != 502 || !strings.Contains(body, "upstream_unreachable") {
		t.Fatalf("preview of a suspended sandbox: %d %q, want it woken and 502 upstream_unreachable (the server is gone)", code, body)
	}
	var sb sbView
	p.call("GET", "/api/v1/sandboxes/"+id, nil, &sb)
	if sb.Status != "ready" {
		t.Fatalf("after the preview request the sandbox is %s, want ready (woken by it)", sb.Status)
	}
	if got, want := ledgerOf(), strings.TrimSuffix(before, "storage:open")+"storage:restored compute:open"; got != want {
		t.Fatalf("ledger after preview wake: %q, want %q", got, want)
	}
	p.startDevServer(id, port, "served after the nap")
	p.waitPreview(pv.URL+"/", "served after the nap")
	if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
		t.Fatalf("the first dev server (pid %d) is still running", pid)
	}
}
