package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDevEdgeUsesInternalAPI: `sbx dev` runs the production edge, which
// asks control through the internal API (edge/controlclient) exactly as
// cmd/edge does: an SSH login and a preview request through sbx dev show
// up in control's internal API request counter.
func TestDevEdgeUsesInternalAPI(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	id := createReady(t, p)

	cmd := exec.Command(sbxBinary(t), "ssh", id, "-F", "/dev/null", "-o", "BatchMode=yes", "echo via-edge")
	cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_DATA_DIR="+p.DataDir, "TMPDIR="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "via-edge") {
		t.Fatalf("sbx ssh: %v %q", err, out)
	}
	var pv portView
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/ports", map[string]any{"port": 4321}, &pv); code != 201 {
		t.Fatalf("POST ports: %d", code)
	}
	// Nothing listens on the port: the proxy resolves the route through
	// control, then answers 502 itself.
	host := strings.TrimPrefix(pv.URL, "http://")
	out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "10",
		"--connect-to", "::127.0.0.1:"+host[strings.LastIndex(host, ":")+1:], "-H", "Authorization: Bearer "+p.Token, pv.URL+"/").CombinedOutput()
	if err != nil || string(out) != "502" {
		t.Fatalf("preview: %v %q, want 502 from the proxy", err, out)
	}

	counts := internalRequests(t, p)
	for _, path := range []string{"/internal/v1/ssh/authorize", "/internal/v1/preview/route", "/internal/v1/preview/token"} {
		if counts[path] == 0 {
			t.Errorf("no internal API request to %s counted (counts %v): the dev edge does not go through controlclient", path, counts)
		}
	}
}

// internalRequests sums sbx_internal_api_requests_total by path.
func internalRequests(t *testing.T, p *devProc) map[string]float64 {
	t.Helper()
	return p.scrapeSums(t, "sbx_internal_api_requests_total", func(l map[string]string) string { return l["path"] })
}
