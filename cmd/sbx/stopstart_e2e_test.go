package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestStopStartEndToEnd runs `sbx stop` and `sbx start` by name against a
// real `sbx dev`: the ledger follows the spec's rows (compute closes with
// user_suspend and storage opens; start closes storage and opens
// compute), the workspace survives, and the declared service is started
// again. `sbx list` shows the name and labels.
func TestStopStartEndToEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		p := startDev(t, t.TempDir(), dbURL)
		st := openStore(t, p.DataDir, dbURL)
		var sb sbView
		code := p.call("POST", "/api/v1/sandboxes", map[string]any{
			"profile": "tuist-linux-small", "name": "my-pr-1234", "labels": map[string]string{"pr": "1234"},
			"services": []map[string]any{{"name": "ticker", "command": "echo started >> starts.log; exec sleep 600"}},
		}, &sb)
		if code != 201 {
			t.Fatalf("create: %d", code)
		}
		id := sb.ID
		sb = p.waitStatus(id, "ready", 2*time.Minute)
		starts := func() int {
			t.Helper()
			var res struct {
				Stdout string `json:"stdout"`
			}
			if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "cat starts.log 2>/dev/null || true"}, &res); code != 200 {
				t.Fatalf("exec: %d", code)
			}
			return strings.Count(res.Stdout, "started")
		}
		waitStarts := func(n int) {
			t.Helper()
			for end := time.Now().Add(30 * time.Second); starts() < n; time.Sleep(100 * time.Millisecond) {
				if time.Now().After(end) {
					t.Fatalf("service started %d times, want %d", starts(), n)
				}
			}
		}
		waitStarts(1)
		if out := p.cli("exec", "my-pr-1234", "--", "cat", "starts.log"); out != "started\n" {
			t.Fatalf("sbx exec by name: %q, want the service's log", out)
		}

		list := p.cli("list")
		if !strings.Contains(list, "my-pr-1234") || !strings.Contains(list, "pr=1234") {
			t.Fatalf("sbx list does not show the name and labels:\n%s", list)
		}

		var stopped sbView
		if err := json.Unmarshal([]byte(p.cli("stop", "my-pr-1234", "-o", "json")), &stopped); err != nil || stopped.Status != "suspended" {
			t.Fatalf("sbx stop: %+v, %v; want suspended", stopped, err)
		}
		if got := ledger(t, st, id); got != "compute:user_suspend storage:open" {
			t.Fatalf("ledger after sbx stop: %q", got)
		}
		if out := p.cli("stop", "my-pr-1234", "-o", "id"); strings.TrimSpace(out) != id {
			t.Fatalf("second sbx stop printed %q, want %s", out, id)
		}

		var started sbView
		if err := json.Unmarshal([]byte(p.cli("start", "my-pr-1234", "-o", "json")), &started); err != nil || started.Status != "ready" {
			t.Fatalf("sbx start: %+v, %v; want ready", started, err)
		}
		if got := ledger(t, st, id); got != "compute:user_suspend storage:restored compute:open" {
			t.Fatalf("ledger after sbx start: %q", got)
		}
		// The service came back: it ran again on the restored workspace,
		// whose log kept the first start.
		waitStarts(2)
	})
}
