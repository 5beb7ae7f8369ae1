package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// mcpClientDir holds the TypeScript SDK client; .ci/run installs its
// node_modules with `npm ci`.
const mcpClientDir = "testdata/mcp-client"

// TestMCPThroughDev is the "must show": the official TypeScript
// SDK client drives a real `sbx dev` through MCP, over Streamable HTTP
// (control's /mcp) and over stdio (`sbx mcp` as a subprocess): create,
// wait ready, write a file, exec a command that reads it with its output
// arriving as progress notifications before it ends, expose a port and
// fetch it through the preview proxy, destroy; then the sandbox's ledger
// holds one closed compute interval. A command longer than the client's
// default 60 s request timeout runs to its end with the client's default
// options, through exec_in_sandbox's handle and wait_exec. A quota refusal and a bad token are
// tool errors carrying the problem type.
func TestMCPThroughDev(t *testing.T) {
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is required (apt-get install nodejs npm)")
	}
	if _, err := os.Stat(filepath.Join(mcpClientDir, "node_modules", "@modelcontextprotocol", "sdk")); err != nil {
		t.Fatalf("the MCP TypeScript SDK is not installed: run `npm ci` in cmd/sbx/%s (.ci/run does)", mcpClientDir)
	}
	p := startDev(t, t.TempDir(), "")
	p.admin("account", "create", "--name", "Limited", "--limit", "0", "acct-limited")
	limited := p.admin("token", "mint", "--account", "acct-limited", "--name", "mcp-e2e")

	// The long command: over HTTP the 90 s one under control's
	// default 45 s bound; over stdio an 8 s one under a 3 s --exec-bound,
	// so the bound is seen to be the server's setting.
	long := map[string]struct {
		seconds int
		bound   string
	}{"http": {90, "45s"}, "stdio": {8, "3s"}}
	for _, mode := range []string{"http", "stdio"} {
		t.Run(mode, func(t *testing.T) {
			cmd := exec.Command("node", "e2e.mjs", mode)
			cmd.Dir = mcpClientDir
			cmd.Env = append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_LIMITED_TOKEN="+strings.TrimSpace(limited),
				"SBX_BIN="+sbxBinary(t), "PREVIEW_PORT_IN_SANDBOX="+strings.Split(freeAddr(t), ":")[1],
				"LONG_SECONDS="+strconv.Itoa(long[mode].seconds), "EXEC_BOUND="+long[mode].bound)
			var stderr lockedBuffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("node e2e.mjs %s: %v\nstdout: %s\nstderr: %s", mode, err, out, stderr.String())
			}
			var seen struct {
				Tools            []string `json:"tools"`
				WithOutputSchema []string `json:"with_output_schema"`
				Created          struct {
					ID, Status, Profile string
				} `json:"created_structured"`
				SandboxID     string `json:"sandbox_id"`
				FirstProgress string `json:"first_progress"`
				PreviewBody   string `json:"preview_body"`
				Destroyed     string `json:"destroyed_status"`
				Quota         struct {
					Type   string `json:"type"`
					Status int    `json:"status"`
					Detail string `json:"detail"`
				} `json:"quota"`
				Long struct {
					Seconds      float64 `json:"seconds"`
					Calls        int     `json:"calls"`
					LongestCallS float64 `json:"longest_call_s"`
					Stdout       string  `json:"stdout"`
					ExitCode     *int    `json:"exit_code"`
				} `json:"long"`
				BadToken struct {
					Type   string `json:"type"`
					Status int    `json:"status"`
				} `json:"bad_token"`
			}
			if err := json.Unmarshal(out, &seen); err != nil {
				t.Fatalf("client output %q: %v", out, err)
			}
			want := []string{"create_sandbox", "create_ssh_credential", "delete_sandbox_file", "delete_sandbox_service", "delete_snapshot", "destroy_sandbox", "ensure_sandbox", "exec_in_sandbox",
				"expose_sandbox_port", "extend_sandbox", "fork_snapshot", "get_sandbox", "get_sandbox_usage", "get_usage", "kill_exec", "list_connections",
				"list_preview_shares", "list_profiles", "list_sandbox_files", "list_sandbox_ports", "list_sandbox_services", "list_sandboxes", "list_snapshots", "read_egress_log",
				"read_exec_output", "read_sandbox_events", "read_sandbox_file", "read_sandbox_service_logs", "recreate_sandbox", "restore_sandbox", "resume_sandbox", "revoke_preview_share",
				"set_sandbox_service", "share_preview", "snapshot_sandbox", "suspend_sandbox", "unexpose_sandbox_port", "update_sandbox", "wait_exec", "wait_sandbox_ready", "write_sandbox_file"}
			if !slices.Equal(seen.Tools, want) {
				t.Errorf("tools %v, want %v", seen.Tools, want)
			}
			// Every tool declares its output; the client validated each
			// result against it.
			if !slices.Equal(seen.WithOutputSchema, want) {
				t.Errorf("tools with an output schema %v, want %v", seen.WithOutputSchema, want)
			}
			if seen.Created.ID != seen.SandboxID || seen.Created.Status != "pending" || seen.Created.Profile != "tuist-linux-small" {
				t.Errorf("create_sandbox's structured content %+v, want the pending sandbox %s", seen.Created, seen.SandboxID)
			}
			if seen.FirstProgress != "hello from the agent\n" || seen.PreviewBody != "served to the agent" {
				t.Errorf("first progress %q, preview body %q", seen.FirstProgress, seen.PreviewBody)
			}
			// Every tick arrived once, in order, across the calls; no call
			// came near the client's 60 s default; the exit was seen.
			lg, n := seen.Long, long[mode].seconds
			var ticks strings.Builder
			for i := 1; i <= n; i++ {
				fmt.Fprintf(&ticks, "tick %d\n", i)
			}
			if lg.ExitCode == nil || *lg.ExitCode != 0 || lg.Stdout != ticks.String()+"long done\n" || lg.Seconds < float64(n) ||
				lg.Calls < 2 || lg.LongestCallS >= 60 {
				t.Errorf("the %d s command through exec_in_sandbox and wait_exec: %+v", n, lg)
			}
			t.Logf("%s: the %d s command took %.1f s over %d calls, the longest %.1f s", mode, n, lg.Seconds, lg.Calls, lg.LongestCallS)
			if seen.Quota.Type != "https://sbx.dev/problems/concurrency_limit" || seen.Quota.Status != 429 {
				t.Errorf("quota refusal %+v, want the concurrency_limit problem", seen.Quota)
			}
			if seen.BadToken.Type != "https://sbx.dev/problems/invalid_token" || seen.BadToken.Status != 401 {
				t.Errorf("bad token %+v, want the invalid_token problem", seen.BadToken)
			}

			p.waitStatus(seen.SandboxID, "terminated", 30*time.Second)
			var usage struct {
				Lines []struct {
					Kind    string     `json:"kind"`
					EndedAt *time.Time `json:"ended_at"`
					Reason  string     `json:"end_reason"`
				} `json:"lines"`
			}
			if code := p.call("GET", "/api/v1/sandboxes/"+seen.SandboxID+"/usage", nil, &usage); code != 200 {
				t.Fatalf("usage: %d", code)
			}
			if len(usage.Lines) != 1 || usage.Lines[0].Kind != "compute" || usage.Lines[0].EndedAt == nil || usage.Lines[0].Reason != "explicit_delete" {
				t.Fatalf("ledger %+v, want one closed compute interval ended by explicit_delete", usage.Lines)
			}
			if mode == "http" {
				p.checkMCPSession(t, seen.SandboxID)
			}
		})
	}
}

// checkMCPSession checks the connection log holds the TypeScript client's
// /mcp session on the sandbox it drove: one live mcp row, listed to the
// account whose token it used, its client kind the one clientInfo
// "sbx-e2e" names (no rule names it, so the catch-all MCP one: "mcp"; its
// user agent alone would say "http").
func (p *devProc) checkMCPSession(t *testing.T, sandboxID string) {
	t.Helper()
	var mine []connRow
	p.waitConnections(t, "/api/v1/connections?live=true", 10*time.Second, func(rows []connRow) bool {
		mine = nil
		for _, r := range rows {
			if r.Kind == "mcp" && r.SandboxID == sandboxID {
				mine = append(mine, r)
			}
		}
		return len(mine) > 0
	})
	if len(mine) != 1 {
		t.Fatalf("mcp rows of %s: %+v, want one: the session", sandboxID, mine)
	}
	r := mine[0]
	if r.ClientKind != "mcp" || r.Detail != "sbx-e2e/1.0.0" || !r.Live || r.Credential == "" || r.BytesIn == 0 {
		t.Errorf("the MCP session's row %+v, want client kind mcp from clientInfo sbx-e2e/1.0.0, live, with its token and bytes", r)
	}
}
