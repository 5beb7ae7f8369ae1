package mcpserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/mcpserver"
)

const fakePrivateKey = "-----BEGIN OPENSSH PRIVATE KEY-----\nFAKE0PRIVATE0KEY0MATERIAL\n-----END OPENSSH PRIVATE KEY-----\n"

// fakeAPI answers the requests the tools below make and records them.
type fakeAPI struct {
	mu   sync.Mutex
	seen []string
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	uri := r.URL.Path // as the API routes it, %2F decoded
	if r.URL.RawQuery != "" {
		uri += "?" + r.URL.RawQuery
	}
	f.seen = append(f.seen, r.Method+" "+uri+" "+string(body))
	f.mu.Unlock()
	answer := map[string]string{
		"GET /api/v1/sandboxes/sbx-1/ports":       `{"ports":[]}`,
		"GET /api/v1/profiles":                    `{"profiles":[]}`,
		"GET /api/v1/sandboxes/sbx-1/events":      `{"events":[{"id":2,"type":"state","at":"2026-01-01T00:00:00Z"},{"id":3,"type":"state","at":"2026-01-01T00:00:01Z"},{"id":4,"type":"deadline","at":"2026-01-01T00:00:02Z"}]}`,
		"GET /api/v1/usage":                       `{"lines":[]}`,
		"GET /api/v1/sandboxes/sbx-1/usage":       `{"lines":[]}`,
		"GET /api/v1/sandboxes/sbx-1/connections": `{"connections":[],"next_cursor":null}`,
		"GET /api/v1/connections":                 `{"connections":[],"next_cursor":null}`,
		"GET /api/v1/sandboxes/sbx-1/egress":      `{"decisions":[],"next_cursor":null}`,
		"POST /api/v1/sandboxes/sbx-1/ssh_tokens": `{"private_key":` + jsonString(fakePrivateKey) + `}`,
		"POST /api/v1/sandboxes/sbx-1/ports/3000/shares": `{"id":"shr-1","port":3000,"note":"","state":"active","created_at":"2026-01-01T00:00:00Z",` +
			`"expires_at":"2026-01-01T02:00:00Z","url":"https://x.preview.test/?sbx_share=sbx_sh_fake"}`,
		"GET /api/v1/sandboxes/sbx-1/ports/3000/shares": `{"shares":[]}`,
	}[r.Method+" "+r.URL.Path]
	switch {
	case r.Method == http.MethodDelete:
		w.WriteHeader(http.StatusNoContent)
	case answer == "":
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"type":"https://sbx.dev/problems/not_found","status":404,"code":"not_found","title":"Not Found","detail":"fake"}`)
	default:
		w.Header().Set("Content-Type", "application/json")
		if r.Method == http.MethodPost {
			w.WriteHeader(http.StatusCreated)
		}
		_, _ = io.WriteString(w, answer)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// TestMoreToolsCoverREST lists the tools as an agent does and checks each
// REST operation an agent uses beyond the core loop has one that names
// it, then calls each and checks it made that request and answered.
func TestMoreToolsCoverREST(t *testing.T) {
	fake := &fakeAPI{}
	ts := httptest.NewServer(fake)
	defer ts.Close()
	api, err := apiclient.New(ts.URL, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	execs := mcpserver.NewExecs(mcpserver.ExecsConfig{})
	defer execs.Close()
	srv, err := mcpserver.New(mcpserver.Config{API: api, OpenAPI: controlapi.OpenAPI(), Execs: execs,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ct, st := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	desc := map[string]string{}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.OutputSchema == nil {
			t.Errorf("%s has no output schema", tool.Name)
		}
		desc[tool.Name] = tool.Description
	}

	for _, c := range []struct {
		rest, tool string
		args       map[string]any
		request    string // what the API saw: method, URI and body
		result     string // a piece of the structured result
	}{
		{"GET /api/v1/sandboxes/{id}/ports", "list_sandbox_ports", map[string]any{"sandbox_id": "sbx-1"},
			"GET /api/v1/sandboxes/sbx-1/ports ", `"ports":[]`},
		{"DELETE /api/v1/sandboxes/{id}/ports/{port}", "unexpose_sandbox_port", map[string]any{"sandbox_id": "sbx-1", "port": 3000},
			"DELETE /api/v1/sandboxes/sbx-1/ports/3000 ", `"unexposed":true`},
		{"DELETE /api/v1/sandboxes/{id}/files/{path}", "delete_sandbox_file", map[string]any{"sandbox_id": "sbx-1", "path": "a/b.txt", "recursive": true},
			"DELETE /api/v1/sandboxes/sbx-1/files/a/b.txt?recursive=true ", `"deleted":true`},
		{"GET /api/v1/profiles", "list_profiles", nil,
			"GET /api/v1/profiles ", `"profiles":[]`},
		{"GET /api/v1/sandboxes/{id}/events", "read_sandbox_events", map[string]any{"sandbox_id": "sbx-1", "after": 1, "limit": 2},
			"GET /api/v1/sandboxes/sbx-1/events?after=1 ", `"next_after":3`},
		{"GET /api/v1/usage", "get_usage", map[string]any{"from": "2026-01-01T00:00:00Z"},
			"GET /api/v1/usage?from=2026-01-01T00%3A00%3A00Z ", `"lines":[]`},
		{"GET /api/v1/sandboxes/{id}/connections", "list_connections", map[string]any{"sandbox_id": "sbx-1", "live": true},
			"GET /api/v1/sandboxes/sbx-1/connections?live=true ", `"connections":[]`},
		{"GET /api/v1/connections", "list_connections", map[string]any{"live": true},
			"GET /api/v1/connections?live=true ", `"connections":[]`},
		{"GET /api/v1/sandboxes/{id}/usage", "get_sandbox_usage", map[string]any{"sandbox_id": "sbx-1"},
			"GET /api/v1/sandboxes/sbx-1/usage ", `"lines":[]`},
		{"POST /api/v1/sandboxes/{id}/ports/{port}/shares", "share_preview", map[string]any{"sandbox_id": "sbx-1", "port": 3000, "expires_in_minutes": 120},
			`POST /api/v1/sandboxes/sbx-1/ports/3000/shares {"expires_in_minutes":120}`, `"url":"https://x.preview.test/?sbx_share=`},
		{"GET /api/v1/sandboxes/{id}/ports/{port}/shares", "list_preview_shares", map[string]any{"sandbox_id": "sbx-1", "port": 3000},
			"GET /api/v1/sandboxes/sbx-1/ports/3000/shares ", `"shares":[]`},
		{"DELETE /api/v1/sandboxes/{id}/ports/{port}/shares/{share_id}", "revoke_preview_share", map[string]any{"sandbox_id": "sbx-1", "port": 3000, "share_id": "shr-1"},
			"DELETE /api/v1/sandboxes/sbx-1/ports/3000/shares/shr-1 ", `"revoked":true`},
		{"GET /api/v1/sandboxes/{id}/egress", "read_egress_log", map[string]any{"sandbox_id": "sbx-1", "limit": 5},
			"GET /api/v1/sandboxes/sbx-1/egress?limit=5 ", `"decisions":[]`},
		{"POST /api/v1/sandboxes/{id}/ssh_tokens", "create_ssh_credential", map[string]any{"sandbox_id": "sbx-1", "ttl_minutes": 30},
			`POST /api/v1/sandboxes/sbx-1/ssh_tokens {"ttl_minutes":30}`, "FAKE0PRIVATE0KEY0MATERIAL"},
	} {
		d, ok := desc[c.tool]
		if !ok {
			t.Errorf("%s: no tool %s", c.rest, c.tool)
			continue
		}
		if !strings.Contains(d, c.rest) {
			t.Errorf("%s's description %q does not name %s", c.tool, d, c.rest)
		}
		fake.mu.Lock()
		fake.seen = nil
		fake.mu.Unlock()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: c.args})
		if err != nil {
			t.Fatalf("%s: %v", c.tool, err)
		}
		out, _ := json.Marshal(res.StructuredContent)
		if res.IsError || !strings.Contains(string(out), c.result) {
			t.Errorf("%s: isError %v, %s; want a result with %s", c.tool, res.IsError, out, c.result)
		}
		fake.mu.Lock()
		seen := fake.seen
		fake.mu.Unlock()
		if len(seen) != 1 || strings.TrimSpace(seen[0]) != strings.TrimSpace(c.request) {
			t.Errorf("%s: the API saw %q, want %q", c.tool, seen, c.request)
		}
	}
	// Long commands: exec_in_sandbox and the tools that follow a command
	// it left running, each naming the streamed exec they drive, and the
	// flow and client setting documented where an agent reads them.
	for _, tool := range []string{"exec_in_sandbox", "wait_exec", "read_exec_output", "kill_exec"} {
		if d, ok := desc[tool]; !ok || !strings.Contains(d, "POST /api/v1/sandboxes/{id}/exec") {
			t.Errorf("long-command tool %s: present %v, description %q does not name the exec endpoint", tool, ok, d)
		}
	}
	for _, want := range []string{"resetTimeoutOnProgress", "wait_exec", "exec_id", "kill_exec", "timeout_seconds"} {
		if !strings.Contains(desc["exec_in_sandbox"], want) {
			t.Errorf("exec_in_sandbox's description does not mention %s: %q", want, desc["exec_in_sandbox"])
		}
	}
	if strings.Contains(logs.String(), "sbx_sh_fake") {
		t.Errorf("a share link's secret reached the log:\n%s", logs.String())
	}
	if strings.Contains(logs.String(), "FAKE0PRIVATE0KEY0MATERIAL") {
		t.Errorf("the private key reached the log:\n%s", logs.String())
	}
}
