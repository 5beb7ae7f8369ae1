package main

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServicesAfterDevRestart: a restarted `sbx dev` brings a ready
// sandbox's server back with nothing running in it; its declared services
// start again, as after a restore, and answer on their port.
func TestServicesAfterDevRestart(t *testing.T) {
	t.Parallel()
	p := startDev(t, t.TempDir(), "")
	port, _ := strconv.Atoi(strings.Split(freeAddr(t), ":")[1])
	var sb sbView
	code := p.call("POST", "/api/v1/sandboxes", map[string]any{
		"profile": "tuist-linux-small",
		"services": []map[string]any{{
			"name": "web", "command": "python3", "args": []string{"-m", "http.server", "--bind", "127.0.0.1", strconv.Itoa(port)}, "port": port,
		}},
	}, &sb)
	if code != 201 {
		t.Fatalf("create with a service: %d", code)
	}
	p.waitStatus(sb.ID, "ready", 30*time.Second)
	p.waitService(sb.ID, "web", "running", func(s serviceView) bool { return s.State == "running" })

	p.stop()
	if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second); err == nil {
		c.Close()
		t.Fatal("the service still answers after sbx dev stopped")
	}
	p = startDev(t, p.DataDir, "")
	p.waitStatus(sb.ID, "ready", 30*time.Second)
	s := p.waitService(sb.ID, "web", "running after the restart", func(s serviceView) bool { return s.State == "running" })
	if out := p.cli("exec", sb.ID, "--", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1:"+strconv.Itoa(port)+"/"); !strings.Contains(out, "200") {
		t.Fatalf("the service's port after the restart: %q (service %+v)", out, s)
	}
}
