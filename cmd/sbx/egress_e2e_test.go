package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestEgressFromSandbox: a sandbox of the real `sbx dev` has the proxy
// environment with its own credential, and curl inside it (every host
// proxied, with an empty --noproxy) reaches a local upstream in the trusted range
// through the gateway, and is refused, with the reason, sbx dev's own
// API even though loopback is trusted. Every address dialed is on
// loopback.
func TestEgressFromSandbox(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "upstream says hi") }))
	t.Cleanup(up.Close)
	p := startDev(t, t.TempDir(), "", "--egress-trust", "127.0.0.0/8")
	id := createReady(t, p)
	exec := func(command string) execResult {
		t.Helper()
		var res execResult
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": command}, &res); code != 200 {
			t.Fatalf("exec %q: %d", command, code)
		}
		return res
	}
	env := exec(`printf '%s\n' "$HTTPS_PROXY" "$http_proxy" "$NO_PROXY"`)
	lines := strings.Split(strings.TrimSpace(env.Stdout), "\n")
	if len(lines) != 3 || lines[0] == "" || lines[0] != lines[1] || lines[2] == "" {
		t.Fatalf("proxy environment: %q", env.Stdout)
	}
	u, err := url.Parse(lines[0])
	if err != nil || u.User.Username() != id {
		t.Fatalf("HTTPS_PROXY %q: want the sandbox %s as its user", lines[0], id)
	}
	if res := exec("curl -sS --max-time 10 --noproxy '' " + up.URL + "/"); res.Stdout != "upstream says hi" {
		t.Errorf("the trusted upstream through the gateway: %+v", res)
	}
	api, _ := url.Parse(p.API)
	res := exec("curl -sS --max-time 10 --noproxy '' http://" + api.Host + "/api/v1/profiles")
	if !strings.Contains(res.Stdout, "own listeners") {
		t.Errorf("sbx dev's API through the gateway: %+v, want the refusal's reason", res)
	}
}
