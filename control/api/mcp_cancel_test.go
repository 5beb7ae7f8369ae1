package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestMCPExecCancel: an agent that gives up on exec_in_sandbox (cancels
// the call, which ends its HTTP request) ends the command in the sandbox.
func TestMCPExecCancel(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "exec_in_sandbox",
			Arguments: map[string]any{"sandbox_id": id, "command": "echo $$ > fg.pid; sleep 300"}})
		done <- err
	}()
	running := `p=$(cat fg.pid 2>/dev/null) && [ -n "$p" ] && kill -0 $p 2>/dev/null && ! grep -q '^State:.*Z' /proc/$p/status && echo running`
	check := func() string {
		code, _, b := e.do("dev", "POST", "/api/v1/sandboxes/"+id+"/exec", jsonBody(map[string]any{"command": running}))
		if code != 200 {
			t.Fatalf("check: %d %s", code, b)
		}
		var r struct{ Stdout string }
		_ = json.Unmarshal(b, &r)
		return r.Stdout
	}
	for deadline := time.Now().Add(20 * time.Second); !strings.Contains(check(), "running"); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	cancel()
	if err := <-done; err == nil {
		t.Fatal("cancelled call returned no error")
	}
	for deadline := time.Now().Add(15 * time.Second); strings.Contains(check(), "running"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command still runs after the agent cancelled the call")
		}
	}
}
