package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCredentialRoute drives the real `sbx dev` stack: an account stores a
// credential for a local upstream (plain HTTP, allowed only because the
// test trusts loopback); a sandbox created with it reaches the upstream
// through SBX_CREDENTIAL_<NAME>_URL and the upstream sees the header;
// the secret is in none of the sandbox's environment and files, no API
// response or event, and not in the stack's whole log output; the use
// is in the egress log; another sandbox's route URL is refused; and a
// deleted credential stops working within 5 s.
func TestCredentialRoute(t *testing.T) {
	const secret = "sk-test-9f3b1c2d7e6a5f4b"
	var mu sync.Mutex
	var seen []string
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		fmt.Fprint(w, "upstream answered "+r.URL.Path)
	}))
	t.Cleanup(up.Close)
	p := startDev(t, t.TempDir(), "", "--egress-trust", "127.0.0.0/8")

	// Every API body this test reads, to look for the secret in.
	var bodies bytes.Buffer
	call := func(method, path string, body any) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, _ := http.NewRequest(method, p.API+path, rd)
		req.Header.Set("Authorization", "Bearer "+p.Token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		bodies.Write(out)
		return resp.StatusCode, out
	}
	if code, out := call("POST", "/api/v1/credentials", map[string]any{"name": "anthropic", "upstream": up.URL + "/base", "header": "x-api-key", "secret": secret}); code != 201 {
		t.Fatalf("create credential: %d %s", code, out)
	}
	if code, out := call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "credentials": []string{"nope"}}); code != 422 {
		t.Errorf("create naming an unknown credential: %d %s, want 422", code, out)
	}
	var sb sbView
	_, out := call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "credentials": []string{"anthropic"}})
	if err := json.Unmarshal(out, &sb); err != nil || sb.ID == "" {
		t.Fatalf("create: %s", out)
	}
	p.waitStatus(sb.ID, "ready", 2*time.Minute)
	other := createReady(t, p)
	exec := func(id, command string) execResult {
		t.Helper()
		var res execResult
		code, out := call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": command})
		if err := json.Unmarshal(out, &res); code != 200 || err != nil {
			t.Fatalf("exec %q: %d %s", command, code, out)
		}
		return res
	}

	res := exec(sb.ID, `curl -sS --max-time 10 "$SBX_CREDENTIAL_ANTHROPIC_URL/v1/messages"`)
	if res.Stdout != "upstream answered /base/v1/messages" {
		t.Fatalf("through the credential route: %+v", res)
	}
	mu.Lock()
	if len(seen) != 1 || seen[0] != "/base/v1/messages "+secret {
		t.Errorf("the upstream saw %q, want the path under its base with the header", seen)
	}
	mu.Unlock()
	env := exec(sb.ID, "env; echo; cat /proc/self/environ 2>/dev/null; grep -rIl -F -- "+secret+" \"$HOME\" /tmp 2>/dev/null; true")
	if strings.Contains(env.Stdout+env.Stderr, secret) {
		t.Errorf("the secret is in the sandbox's environment or files")
	}
	routeURL := strings.TrimSpace(exec(sb.ID, `printf %s "$SBX_CREDENTIAL_ANTHROPIC_URL"`).Stdout)
	if routeURL == "" {
		t.Fatal("SBX_CREDENTIAL_ANTHROPIC_URL is empty")
	}
	if out := exec(other, `printf %s "$SBX_CREDENTIAL_ANTHROPIC_URL"`).Stdout; out != "" {
		t.Errorf("a sandbox created without the route has %q", out)
	}
	if code, out := call("GET", "/api/v1/credentials", nil); code != 200 || !strings.Contains(string(out), `"last_used_at":"`) {
		t.Errorf("list credentials: %d %s, want the use stamped", code, out)
	}

	// The log: the use, against the upstream's host.
	found := false
	for deadline := time.Now().Add(10 * time.Second); !found && time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		_, out := call("GET", "/api/v1/sandboxes/"+sb.ID+"/egress", nil)
		found = strings.Contains(string(out), `"verdict":"allowed"`) && strings.Contains(string(out), `"host":"127.0.0.1"`)
	}
	if !found {
		t.Error("the credential route's use is not in the egress log")
	}

	if out := p.cli("credentials", "ls"); !strings.Contains(out, "anthropic") || !strings.Contains(out, up.URL) || strings.Contains(out, secret) {
		t.Errorf("sbx credentials ls: %q", out)
	}
	cmd := osexec.Command(sbxBinary(t), "credentials", "add", "second", "--upstream", "https://api.example.com", "--header", "x-api-key")
	cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(p.DataDir, "cli-config"))
	cmd.Stdin = strings.NewReader(secret + "\n")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), secret) {
		t.Errorf("sbx credentials add (secret on stdin): %v %s", err, out)
	}
	p.cli("credentials", "rm", "second")
	if code, _ := call("DELETE", "/api/v1/credentials/anthropic", nil); code != 204 {
		t.Fatalf("delete credential: %d", code)
	}
	deleted := time.Now()
	for {
		res := exec(sb.ID, `curl -sS --max-time 10 "$SBX_CREDENTIAL_ANTHROPIC_URL/v1/messages"`)
		if strings.Contains(res.Stdout, "not available to this sandbox") {
			break
		}
		if time.Since(deleted) > 5*time.Second {
			t.Fatalf("5 s after the delete the route still answers: %+v", res)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, id := range []string{sb.ID, other} {
		call("GET", "/api/v1/sandboxes/"+id, nil)
		call("GET", "/api/v1/sandboxes/"+id+"/events", nil)
		call("GET", "/api/v1/sandboxes/"+id+"/egress", nil)
	}
	call("GET", "/api/v1/credentials", nil)
	if strings.Contains(bodies.String(), secret) {
		t.Error("the secret is in an API response or event")
	}
	p.stop()
	if strings.Contains(p.log.String(), secret) {
		t.Error("the secret is in the stack's log output")
	}
}
