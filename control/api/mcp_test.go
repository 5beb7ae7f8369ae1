package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ header string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if b.header != "" {
		r.Header.Set("Authorization", b.header)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// mcpSession connects an MCP client to control's /mcp with the named
// token; progress notifications are sent to progress.
func (e *env) mcpSession(t *testing.T, auth string, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	return e.mcpSessionAs(t, &mcp.Implementation{Name: "api-test", Version: "1"}, auth, progress)
}

// mcpSessionAs is mcpSession with the client's clientInfo.
func (e *env) mcpSessionAs(t *testing.T, client *mcp.Implementation, auth string, progress func(*mcp.ProgressNotificationParams)) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(_ context.Context, r *mcp.ProgressNotificationClientRequest) { progress(r.Params) }
	}
	c := mcp.NewClient(client, opts)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.svc.URL() + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{auth}}, DisableStandaloneSSE: true}, nil)
	if err != nil {
		t.Fatalf("connect to /mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// call calls a tool and returns its structured content as a map, and
// whether it was a tool error.
func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any, meta ...mcp.Meta) (map[string]any, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p := &mcp.CallToolParams{Name: name, Arguments: args}
	if len(meta) > 0 {
		p.Meta = meta[0]
	}
	res, err := s.CallTool(ctx, p)
	if err != nil {
		t.Fatalf("%s: protocol error %v", name, err)
	}
	var out map[string]any
	b, _ := json.Marshal(res.StructuredContent)
	_ = json.Unmarshal(b, &out)
	checkOutput(t, s, name, b)
	return out, res.IsError
}

// checkOutput validates a result's structured content against the
// output schema the tool declares, errors included, as the TypeScript
// SDK's client does.
func checkOutput(t *testing.T, s *mcp.ClientSession, name string, structured []byte) {
	t.Helper()
	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatalf("list tools: %v", err)
	}
	var schema any
	for _, tl := range tools.Tools {
		if tl.Name == name {
			schema = tl.OutputSchema
		}
	}
	if schema == nil {
		t.Errorf("%s declares no output schema", name)
		return
	}
	doc, _ := json.Marshal(schema)
	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("mem://out.json", raw); err != nil {
		t.Fatalf("%s output schema: %v", name, err)
	}
	sch, err := c.Compile("mem://out.json")
	if err != nil {
		t.Fatalf("%s output schema does not compile: %v", name, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(structured))
	if err != nil {
		t.Fatalf("%s structured content is not JSON: %v", name, err)
	}
	if err := sch.Validate(v); err != nil {
		t.Errorf("%s structured content does not match its output schema: %v\n%s", name, err, structured)
	}
}

// TestMCPTools drives the tools through control's /mcp with the Go SDK's
// client: a sandbox's whole flow, exec output as progress before the
// command ends, and refusals as tool errors carrying the problem.
func TestMCPTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	var mu sync.Mutex
	var notes []*mcp.ProgressNotificationParams
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], func(p *mcp.ProgressNotificationParams) {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, p)
	})

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.Name == "exec_in_sandbox" {
			schema, _ := json.Marshal(tl.InputSchema)
			if !strings.Contains(string(schema), `"timeout_seconds"`) || !strings.Contains(string(schema), `"sandbox_id"`) || strings.Contains(string(schema), `"stream"`) {
				t.Errorf("exec_in_sandbox schema %s: want ExecRequest's fields and sandbox_id, without stream", schema)
			}
		}
	}
	slices.Sort(names)
	want := []string{"create_sandbox", "create_ssh_credential", "delete_sandbox_file", "delete_sandbox_service", "delete_snapshot", "destroy_sandbox", "ensure_sandbox", "exec_in_sandbox",
		"expose_sandbox_port", "extend_sandbox", "fork_snapshot", "get_sandbox", "get_sandbox_usage", "get_usage", "kill_exec", "list_connections",
		"list_preview_shares", "list_profiles", "list_sandbox_files", "list_sandbox_ports", "list_sandbox_services", "list_sandboxes", "list_snapshots", "read_egress_log",
		"read_exec_output", "read_sandbox_events", "read_sandbox_file", "read_sandbox_service_logs", "recreate_sandbox", "restore_sandbox", "resume_sandbox", "revoke_preview_share",
		"set_sandbox_service", "share_preview", "snapshot_sandbox", "suspend_sandbox", "unexpose_sandbox_port", "update_sandbox", "wait_exec", "wait_sandbox_ready", "write_sandbox_file"}
	if !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	sb, isErr := call(t, s, "create_sandbox", map[string]any{"profile": "tuist-linux-small"})
	id, _ := sb["id"].(string)
	if isErr || id == "" {
		t.Fatalf("create_sandbox: %v", sb)
	}
	if got, isErr := call(t, s, "wait_sandbox_ready", map[string]any{"sandbox_id": id}); isErr || got["status"] != "ready" {
		t.Fatalf("wait_sandbox_ready: %v", got)
	}
	if got, isErr := call(t, s, "write_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/in.txt", "content": "hello mcp\n"}); isErr || got["size"] != float64(10) {
		t.Fatalf("write_sandbox_file: %v", got)
	}
	bin := "AP8Q" // 0x00 0xff 0x10
	if got, isErr := call(t, s, "write_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/b.bin", "content": bin, "encoding": "base64"}); isErr {
		t.Fatalf("write binary: %v", got)
	}
	if got, isErr := call(t, s, "read_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/b.bin"}); isErr || got["encoding"] != "base64" || got["content"] != bin || got["mime_type"] == "" {
		t.Fatalf("read binary: %v", got)
	}
	if got, isErr := call(t, s, "read_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/in.txt"}); isErr || got["content"] != "hello mcp\n" || got["encoding"] != "utf-8" {
		t.Fatalf("read text: %v", got)
	}
	if got, isErr := call(t, s, "list_sandbox_files", map[string]any{"sandbox_id": id, "path": "dir"}); isErr || len(got["entries"].([]any)) != 2 {
		t.Fatalf("list_sandbox_files: %v", got)
	}

	// The command waits for a file the test writes only once the first
	// line reached it as a progress notification.
	done := make(chan map[string]any, 1)
	go func() {
		got, _ := call(t, s, "exec_in_sandbox", map[string]any{"sandbox_id": id,
			"command": "cat dir/in.txt; while [ ! -e go ]; do sleep 0.05; done; echo bye >&2"}, mcp.Meta{"progressToken": "p1"})
		done <- got
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		n := len(notes)
		mu.Unlock()
		if n > 0 {
			break
		}
		select {
		case got := <-done:
			t.Fatalf("exec ended before any progress: %v", got)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("no progress notification")
		}
	}
	if code, _, b := e.do("dev", "PUT", "/api/v1/sandboxes/"+id+"/files/go", strings.NewReader("")); code != 201 {
		t.Fatalf("put go: %d %s", code, b)
	}
	got := <-done
	if got["exit_code"] != float64(0) || got["stdout"] != "hello mcp\n" || got["stderr"] != "bye\n" {
		t.Fatalf("exec result %v", got)
	}
	mu.Lock()
	first := notes[0]
	mu.Unlock()
	if first.ProgressToken != "p1" || first.Message != "hello mcp\n" || first.Meta["stream"] != "stdout" {
		t.Fatalf("first progress %+v, want token p1, the file's line on stdout", first)
	}

	if got, isErr := call(t, s, "expose_sandbox_port", map[string]any{"sandbox_id": id, "port": 8080}); isErr || !strings.Contains(got["url"].(string), "preview.test") {
		t.Fatalf("expose_sandbox_port: %v", got)
	}
	// The tools for the rest of the REST API, each answer checked against
	// its output schema by call.
	if got, isErr := call(t, s, "list_sandbox_ports", map[string]any{"sandbox_id": id}); isErr || len(got["ports"].([]any)) != 1 {
		t.Fatalf("list_sandbox_ports: %v", got)
	}
	if got, isErr := call(t, s, "unexpose_sandbox_port", map[string]any{"sandbox_id": id, "port": 8080}); isErr || got["unexposed"] != true {
		t.Fatalf("unexpose_sandbox_port: %v", got)
	}
	if got, isErr := call(t, s, "list_sandbox_ports", map[string]any{"sandbox_id": id}); isErr || len(got["ports"].([]any)) != 0 {
		t.Fatalf("list_sandbox_ports after unexpose: %v", got)
	}
	if got, isErr := call(t, s, "delete_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/b.bin"}); isErr || got["deleted"] != true {
		t.Fatalf("delete_sandbox_file: %v", got)
	}
	if got, isErr := call(t, s, "read_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir/b.bin"}); !isErr || got["status"] != float64(404) {
		t.Fatalf("read a deleted file: %v, want a 404 problem", got)
	}
	if got, isErr := call(t, s, "list_profiles", nil); isErr || len(got["profiles"].([]any)) == 0 {
		t.Fatalf("list_profiles: %v", got)
	}
	if got, isErr := call(t, s, "read_sandbox_events", map[string]any{"sandbox_id": id, "limit": 1}); isErr || len(got["events"].([]any)) != 1 || got["next_after"] == nil {
		t.Fatalf("read_sandbox_events limit 1: %v, want one event and next_after", got)
	}
	if got, isErr := call(t, s, "read_sandbox_events", map[string]any{"sandbox_id": id}); isErr || len(got["events"].([]any)) < 2 || got["next_after"] != nil {
		t.Fatalf("read_sandbox_events: %v, want every event and no next_after", got)
	}
	if got, isErr := call(t, s, "get_usage", map[string]any{"from": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)}); isErr {
		t.Fatalf("get_usage: %v", got)
	}
	if got, isErr := call(t, s, "get_sandbox_usage", map[string]any{"sandbox_id": id}); isErr {
		t.Fatalf("get_sandbox_usage: %v", got)
	}
	key, isErr := call(t, s, "create_ssh_credential", map[string]any{"sandbox_id": id, "ttl_minutes": 5})
	if pem, _ := key["private_key_pem"].(string); isErr || !strings.Contains(pem, "PRIVATE KEY") {
		t.Fatalf("create_ssh_credential: isError %v, %d fields, want a private key", isErr, len(key))
	}

	// Services: declared, listed with their state, their output read, removed.
	if got, isErr := call(t, s, "set_sandbox_service", map[string]any{"sandbox_id": id, "name": "web", "command": "echo hello from $SBX_SERVICE; sleep 600",
		"port": 3000, "env": map[string]any{"A": "1"}}); isErr || got["name"] != "web" || got["port"] != float64(3000) {
		t.Fatalf("set_sandbox_service: %v", got)
	}
	if got, isErr := call(t, s, "list_sandbox_services", map[string]any{"sandbox_id": id}); isErr || len(got["services"].([]any)) != 1 {
		t.Fatalf("list_sandbox_services: %v", got)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, isErr := call(t, s, "read_sandbox_service_logs", map[string]any{"sandbox_id": id, "name": "web", "tail": 10})
		if isErr {
			t.Fatalf("read_sandbox_service_logs: %v", got)
		}
		if strings.Contains(got["text"].(string), "hello from web") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("read_sandbox_service_logs: %v, want the service's line", got)
		}
	}
	// A wrong name is told which names are right.
	if got, isErr := call(t, s, "read_sandbox_service_logs", map[string]any{"sandbox_id": id, "name": "wbe"}); !isErr || got["code"] != "service_not_found" ||
		got["detail"] != `this sandbox declares no service named "wbe"; its services: web` {
		t.Fatalf("read_sandbox_service_logs of a misspelt service: %v, want service_not_found naming web", got)
	}
	if got, isErr := call(t, s, "delete_sandbox_service", map[string]any{"sandbox_id": id, "name": "web"}); isErr || got["deleted"] != true {
		t.Fatalf("delete_sandbox_service: %v", got)
	}
	if got, isErr := call(t, s, "delete_sandbox_service", map[string]any{"sandbox_id": id, "name": "web"}); !isErr || got["code"] != "service_not_found" ||
		got["detail"] != `this sandbox declares no service named "web"; it declares none` {
		t.Fatalf("delete_sandbox_service again: %v, want service_not_found saying there are none", got)
	}

	if got, isErr := call(t, s, "extend_sandbox", map[string]any{"sandbox_id": id, "deadline_minutes": 90}); isErr || got["id"] != id {
		t.Fatalf("extend_sandbox: %v", got)
	}
	if got, isErr := call(t, s, "update_sandbox", map[string]any{"sandbox_id": id, "idle_timeout_minutes": 3, "keep_awake_while_busy": false, "retention_days": 2}); isErr ||
		got["idle_timeout_minutes"] != float64(3) || got["keep_awake_while_busy"] != false || got["retention_days"] != float64(2) {
		t.Fatalf("update_sandbox: %v", got)
	}
	if got, isErr := call(t, s, "update_sandbox", map[string]any{"sandbox_id": id, "retention_days": 0}); !isErr || !strings.Contains(fmt.Sprint(got), "retention_days") {
		t.Fatalf("update_sandbox retention_days 0: %v, want an error naming the field", got)
	}
	if got, isErr := call(t, s, "list_sandboxes", map[string]any{"limit": 5}); isErr || len(got["sandboxes"].([]any)) != 1 {
		t.Fatalf("list_sandboxes: %v", got)
	}

	t.Run("refusals are tool errors with the problem", func(t *testing.T) {
		big := strings.Repeat("x", 1<<20+1)
		for _, c := range []struct {
			name, tool string
			args       map[string]any
			code       string
			detail     string
		}{
			{"unknown sandbox", "get_sandbox", map[string]any{"sandbox_id": "sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa"}, "sandbox_not_found", ""},
			{"bad arguments", "create_sandbox", map[string]any{"profile": "tuist-linux-small", "colour": "red"}, "invalid_arguments", "colour"},
			{"unknown profile", "create_sandbox", map[string]any{"profile": "nope"}, "unknown_profile", `"nope"; profiles: tuist-linux-large, tuist-linux-medium, tuist-linux-small`},
			{"large write", "write_sandbox_file", map[string]any{"sandbox_id": id, "path": "big", "content": big}, "file_too_large", "PUT /api/v1/sandboxes/{id}/files/{path}"},
			{"read a folder", "read_sandbox_file", map[string]any{"sandbox_id": id, "path": "dir"}, "is_a_folder", "list_sandbox_files"},
		} {
			got, isErr := call(t, s, c.tool, c.args)
			if !isErr || got["code"] != c.code || got["type"] != "https://sbx.dev/problems/"+c.code || !strings.Contains(got["detail"].(string), c.detail) {
				t.Errorf("%s: isError %v, %v; want a tool error %s naming %q", c.name, isErr, got, c.code, c.detail)
			}
		}
	})

	t.Run("quota and bad token", func(t *testing.T) {
		other := e.mcpSession(t, "Bearer "+e.tokens["other"], nil)
		if got, isErr := call(t, other, "create_sandbox", map[string]any{"profile": "tuist-linux-small"}); isErr {
			t.Fatalf("first create for other: %v", got)
		}
		got, isErr := call(t, other, "create_sandbox", map[string]any{"profile": "tuist-linux-small"})
		if !isErr || got["code"] != "concurrency_limit" || got["status"] != float64(429) {
			t.Fatalf("second create over the limit: %v, want tool error concurrency_limit 429", got)
		}
		// A bad token is refused by the endpoint itself, at initialize:
		// 401 with WWW-Authenticate, as MCP's authorization rules ask.
		c := mcp.NewClient(&mcp.Implementation{Name: "api-test", Version: "1"}, nil)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if s, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.svc.URL() + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{"Bearer sbx_at_notarealtokennotarealtokennotareal"}}, DisableStandaloneSSE: true}, nil); err == nil {
			s.Close()
			t.Fatal("initialize with a bad token succeeded")
		}
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
		for _, c := range []struct{ name, auth, code, challenge string }{
			{"no token", "", "unauthenticated", `Bearer realm="sbx"`},
			{"bad token", "Bearer sbx_at_notarealtokennotarealtokennotareal", "invalid_token", `Bearer realm="sbx", error="invalid_token"`},
		} {
			code, hdr, b := e.do("", "POST", "/mcp", strings.NewReader(init), "Authorization", c.auth,
				"Content-Type", "application/json", "Accept", "application/json, text/event-stream")
			if code != 401 || !strings.Contains(string(b), `"code":"`+c.code+`"`) || hdr.Get("WWW-Authenticate") != c.challenge {
				t.Errorf("%s: %d %q %s, want 401 %s with %q", c.name, code, hdr.Get("WWW-Authenticate"), b, c.code, c.challenge)
			}
		}
	})

	if got, isErr := call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": id}); isErr || (got["status"] != "terminating" && got["status"] != "terminated") {
		t.Fatalf("destroy_sandbox: %v", got)
	}
}

// TestMCPDotArguments: a tool argument of "." or ".." is a tool error and
// leaves the sandbox alone. delete_sandbox_service with the name ".."
// once destroyed the sandbox (its URL resolved to .../sandboxes/{id}/)
// and reported {"deleted":true}.
func TestMCPDotArguments(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
	sb, isErr := call(t, s, "create_sandbox", map[string]any{"profile": "tuist-linux-small"})
	id, _ := sb["id"].(string)
	if isErr || id == "" {
		t.Fatalf("create_sandbox: %v", sb)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"delete_sandbox_service", map[string]any{"sandbox_id": id, "name": ".."}},
		{"delete_sandbox_service", map[string]any{"sandbox_id": id, "name": "."}},
		{"list_sandbox_files", map[string]any{"sandbox_id": id, "path": ".."}},
		{"destroy_sandbox", map[string]any{"sandbox_id": ".."}},
	} {
		if out, isErr := call(t, s, c.tool, c.args); !isErr {
			t.Errorf("%s %v: %v, want a tool error", c.tool, c.args, out)
		}
	}
	got, isErr := call(t, s, "get_sandbox", map[string]any{"sandbox_id": id})
	if isErr || got["end_reason"] != nil || got["status"] != sb["status"] {
		t.Fatalf("after the dot arguments: %v, want the sandbox as created (%v)", got, sb["status"])
	}
}

// TestMCPArgumentsChecked: a call's arguments are checked against the
// input schema the tool advertises before any request is made. A missing
// sandbox_id was a 502 tool_failed about "." or ".." (the empty ID made
// the URL .../sandboxes/), an ID outside the pattern a 404, and a string
// for an integer a message naming Go types.
func TestMCPArgumentsChecked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
	for _, c := range []struct {
		tool string
		args map[string]any
		want string // in the detail
	}{
		{"get_sandbox", map[string]any{}, "sandbox_id"},
		{"get_sandbox", map[string]any{"sandbox_id": "Not_An_ID"}, "sandbox_id"},
		{"exec_in_sandbox", map[string]any{"command": "true"}, "sandbox_id"},
		{"create_sandbox", map[string]any{"deadline_minutes": "5"}, "deadline_minutes"},
		{"create_sandbox", map[string]any{"deadline_minutes": 0}, "deadline_minutes"},
		{"list_sandboxes", map[string]any{"status": "bogus"}, "status"},
		{"list_sandboxes", map[string]any{"limit": 500}, "limit"},
		{"read_sandbox_file", map[string]any{"sandbox_id": "sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa"}, "path"},
	} {
		out, isErr := call(t, s, c.tool, c.args)
		detail, _ := out["detail"].(string)
		if !isErr || out["code"] != "invalid_arguments" || out["status"] != float64(422) ||
			!strings.Contains(detail, c.want) || strings.Contains(detail, "Go ") {
			t.Errorf("%s %v: %v, want a 422 invalid_arguments naming %s", c.tool, c.args, out, c.want)
		}
	}
	// Nothing was created by the refused calls.
	if got, isErr := call(t, s, "list_sandboxes", map[string]any{}); isErr || len(got["sandboxes"].([]any)) != 0 {
		t.Errorf("list_sandboxes after refused calls: %v", got)
	}
}
