package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control"
)

// mcpRow is a connection row as these tests read it.
type mcpRow struct {
	SandboxID  string `json:"sandbox_id"`
	Kind       string `json:"kind"`
	Credential string `json:"credential"`
	ClientKind string `json:"client_kind"`
	Detail     string `json:"client_detail"`
	EndReason  string `json:"end_reason"`
	BytesIn    int64  `json:"bytes_in"`
}

// mcpRows lists the mcp rows of the token's account at path.
func (e *env) mcpRows(tok, path string) []mcpRow {
	e.t.Helper()
	code, _, b := e.do(tok, "GET", path, nil)
	if code != 200 {
		e.t.Fatalf("GET %s: %d %s", path, code, b)
	}
	var out struct {
		Connections []mcpRow `json:"connections"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		e.t.Fatal(err)
	}
	var rows []mcpRow
	for _, r := range out.Connections {
		if r.Kind == "mcp" {
			rows = append(rows, r)
		}
	}
	return rows
}

// An MCP session is in the connection log: one row on the sandbox its
// calls act on (however many calls), its client kind from initialize's
// clientInfo, live until the idle period passes without a request, then
// ended as idle. A call naming another account's sandbox leaves no row.
func TestMCPSessionInConnectionLog(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true, func(c *control.Config) { c.MCPSessionIdle = 2 * time.Second })
	mine, theirs := e.createDev(), e.create("other", map[string]string{"profile": "tuist-linux-small"})
	s := e.mcpSessionAs(t, &mcp.Implementation{Name: "claude-code", Version: "2.1"}, "Bearer "+e.tokens["dev"], nil)
	call(t, s, "list_sandboxes", map[string]any{})
	for range 2 {
		if _, isErr := call(t, s, "get_sandbox", map[string]any{"sandbox_id": mine.ID}); isErr {
			t.Fatal("get_sandbox of the caller's sandbox failed")
		}
	}
	if _, isErr := call(t, s, "get_sandbox", map[string]any{"sandbox_id": theirs.ID}); !isErr {
		t.Fatal("get_sandbox of another account's sandbox succeeded")
	}

	var live []mcpRow
	for deadline := time.Now().Add(10 * time.Second); len(live) == 0 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		live = e.mcpRows("dev", "/api/v1/connections?live=true")
	}
	if len(live) != 1 || live[0].SandboxID != mine.ID || live[0].ClientKind != "claude" || live[0].Detail != "claude-code/2.1" ||
		live[0].Credential == "" || live[0].BytesIn == 0 {
		t.Fatalf("live mcp rows %+v, want one on %s from claude-code/2.1 with its token and bytes", live, mine.ID)
	}
	if rows := e.mcpRows("other", "/api/v1/connections"); len(rows) != 0 {
		t.Errorf("the other account's mcp rows %+v, want none", rows)
	}

	var ended []mcpRow
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if ended = e.mcpRows("dev", "/api/v1/connections"); len(ended) == 1 && ended[0].EndReason != "" {
			break
		}
	}
	if len(ended) != 1 || ended[0].EndReason != "idle" {
		t.Fatalf("mcp rows after the idle period %+v, want the one ended as idle", ended)
	}
}
