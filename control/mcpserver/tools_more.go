package mcpserver

import (
	"context"
	"fmt"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// registerMore adds the tools for the REST operations an agent reaches
// for after the core loop: ports, deleting files, profiles, events,
// usage and SSH credentials. register calls it with the shared sandbox
// id schema; a missing contract piece panics, which register recovers.
func (t *tools) registerMore(c *contract, id map[string]any, out *outputs) {
	yes, no := true, false
	must := func(s map[string]any, err error) map[string]any {
		if err != nil {
			panic(err)
		}
		return s
	}
	sandboxOnly := object(nil, map[string]any{"sandbox_id": id}, "sandbox_id")

	t.add(&mcp.Tool{Name: "list_sandbox_ports", Title: "List exposed ports",
		Description: "The sandbox's exposed ports with their preview URLs (GET /api/v1/sandboxes/{id}/ports).",
		InputSchema: sandboxOnly, OutputSchema: out.api("/api/v1/sandboxes/{id}/ports", "get", "200"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.listPorts))

	port := must(c.param("/api/v1/sandboxes/{id}/ports/{port}", "delete", "port"))
	t.add(&mcp.Tool{Name: "unexpose_sandbox_port", Title: "Stop exposing a port",
		Description: "Stop exposing a port (DELETE /api/v1/sandboxes/{id}/ports/{port}): its preview URL stops working at once; " +
			"exposing it again gives a new URL.",
		InputSchema:  object(nil, map[string]any{"sandbox_id": id, "port": port}, "sandbox_id", "port"),
		OutputSchema: typed[portUnexposed](out),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false},
	}, withArgs(t.unexposePort))

	filePath := must(c.param("/api/v1/sandboxes/{id}/files/{path}", "delete", "path"))
	filePath["description"] = "File or folder path relative to the workspace."
	recursive := must(c.param("/api/v1/sandboxes/{id}/files/{path}", "delete", "recursive"))
	recursive["description"] = "Delete a folder with everything in it; without it only an empty folder is deleted."
	t.add(&mcp.Tool{Name: "delete_sandbox_file", Title: "Delete a file or folder",
		Description: "Delete a file or folder of the workspace (DELETE /api/v1/sandboxes/{id}/files/{path}). " +
			"A suspended sandbox is woken first.",
		InputSchema:  object(nil, map[string]any{"sandbox_id": id, "path": filePath, "recursive": recursive}, "sandbox_id", "path"),
		OutputSchema: typed[fileDeleted](out),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: false},
	}, withArgs(t.deleteFile))

	t.add(&mcp.Tool{Name: "list_profiles", Title: "List profiles",
		Description: "The profiles a sandbox may be created with, the default one marked (GET /api/v1/profiles): " +
			"create_sandbox's profile is one of these names.",
		InputSchema: object(nil, map[string]any{}), OutputSchema: out.api("/api/v1/profiles", "get", "200"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.listProfiles))

	after := must(c.param("/api/v1/sandboxes/{id}/events", "get", "after"))
	t.add(&mcp.Tool{Name: "read_sandbox_events", Title: "Read a sandbox's events",
		Description: fmt.Sprintf("A page of the sandbox's lifecycle events, oldest first (GET /api/v1/sandboxes/{id}/events, not streamed): "+
			"state changes with their reason, deadline changes, repository clone steps. At most limit events (default %d); "+
			"when more remain, next_after is the after to read the next page with. To wait for a state, use wait_sandbox_ready.", defaultEventPage),
		InputSchema: object(nil, map[string]any{"sandbox_id": id, "after": after,
			"limit": map[string]any{"type": "integer", "minimum": 1, "maximum": maxEventPage, "default": defaultEventPage,
				"description": "How many events to return at most."}}, "sandbox_id"),
		OutputSchema: typed[eventPage](out),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.readEvents))

	t.add(&mcp.Tool{Name: "get_usage", Title: "Read the account's usage",
		Description: "Billable seconds from the ledger over a window (GET /api/v1/usage); from and to are RFC 3339 times.",
		InputSchema: object(nil, map[string]any{
			"from": must(c.param("/api/v1/usage", "get", "from")),
			"to":   must(c.param("/api/v1/usage", "get", "to")),
		}),
		OutputSchema: out.api("/api/v1/usage", "get", "200"),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.usage))

	t.add(&mcp.Tool{Name: "get_sandbox_usage", Title: "Read a sandbox's usage",
		Description: "Every billing ledger line of one sandbox, oldest first, each with why it closed (GET /api/v1/sandboxes/{id}/usage).",
		InputSchema: sandboxOnly, OutputSchema: out.api("/api/v1/sandboxes/{id}/usage", "get", "200"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.sandboxUsage))

	t.add(&mcp.Tool{Name: "read_egress_log", Title: "Read a sandbox's egress log",
		Description: "The egress gateway's recent decisions about the sandbox's outbound connections, newest first " +
			"(GET /api/v1/sandboxes/{id}/egress): destination, verdict (allowed, denied, failed), the reason of a refusal " +
			"and the bytes each way. Read it when a download or an API call from the sandbox fails: a denied line says what " +
			"the network policy allows. When next_cursor is set, pass it as cursor for older lines.",
		InputSchema: object(nil, map[string]any{"sandbox_id": id,
			"limit":  must(c.param("/api/v1/sandboxes/{id}/egress", "get", "limit")),
			"cursor": must(c.param("/api/v1/sandboxes/{id}/egress", "get", "cursor"))}, "sandbox_id"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/egress", "get", "200"),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.egressLog))

	ssh := must(c.at("#/components/schemas/SSHTokenRequest"))
	t.add(&mcp.Tool{Name: "create_ssh_credential", Title: "Mint an SSH credential",
		Description: "Mint an SSH key bound to this one sandbox (POST /api/v1/sandboxes/{id}/ssh_tokens). The private key is in the " +
			"result once and is never stored or shown again: save it (mode 0600) before using it with the host, port and user given.",
		InputSchema:  object(ssh, map[string]any{"sandbox_id": id}, "sandbox_id"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/ssh_tokens", "post", "201"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, withArgs(t.createSSHCredential))

	t.addShareTools(c, out, id, must)
}

const (
	defaultEventPage = 100
	maxEventPage     = 1000
)

func (t *tools) listPorts(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ListPortsWithResponse(ctx, args.SandboxID, auth))
}

// portUnexposed is unexpose_sandbox_port's result: the API's 204 has no body.
type portUnexposed struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	Unexposed bool   `json:"unexposed"`
}

func (t *tools) unexposePort(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	Port int `json:"port"`
}, auth apiclient.RequestEditorFn) (any, error) {
	if _, err := apiclient.Result(t.api.UnexposePortWithResponse(ctx, args.SandboxID, args.Port, auth)); err != nil {
		return nil, err
	}
	return portUnexposed{SandboxID: args.SandboxID, Port: args.Port, Unexposed: true}, nil
}

// fileDeleted is delete_sandbox_file's result: the API's 204 has no body.
type fileDeleted struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	Deleted   bool   `json:"deleted"`
}

func (t *tools) deleteFile(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	Path      string `json:"path"`
	Recursive *bool  `json:"recursive"`
}, auth apiclient.RequestEditorFn) (any, error) {
	if _, err := apiclient.Result(t.api.DeleteSandboxFileWithResponse(ctx, args.SandboxID, args.Path,
		&apiclient.DeleteSandboxFileParams{Recursive: args.Recursive}, auth)); err != nil {
		return nil, err
	}
	return fileDeleted{SandboxID: args.SandboxID, Path: args.Path, Deleted: true}, nil
}

func (t *tools) listProfiles(ctx context.Context, req *mcp.CallToolRequest, _ struct{}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ListProfilesWithResponse(ctx, auth))
}

// eventPage is read_sandbox_events' result.
type eventPage struct {
	Events []apiclient.Event `json:"events"`
	// NextAfter is set when more events follow: the after of the next page.
	NextAfter *int `json:"next_after,omitempty"`
}

// readEvents answers with one bounded page of the JSON list: a tool call
// answers once, so following the stream is left to wait_sandbox_ready
// and the REST stream.
func (t *tools) readEvents(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	After *int `json:"after"`
	Limit *int `json:"limit"`
}, auth apiclient.RequestEditorFn) (any, error) {
	limit := defaultEventPage
	if args.Limit != nil {
		limit = *args.Limit
	}
	r, err := apiclient.Result(t.api.SandboxEventsWithResponse(ctx, args.SandboxID, &apiclient.SandboxEventsParams{After: args.After}, auth))
	if err != nil {
		return nil, err
	}
	if r.JSON200 == nil {
		return nil, &toolErr{status: http.StatusBadGateway, code: "tool_failed", detail: "the events answer was not the JSON list"}
	}
	page := eventPage{Events: r.JSON200.Events}
	if page.Events == nil {
		page.Events = []apiclient.Event{}
	}
	if len(page.Events) > limit {
		page.Events = page.Events[:limit]
		next := page.Events[limit-1].Id
		page.NextAfter = &next
	}
	return page, nil
}

func (t *tools) usage(ctx context.Context, req *mcp.CallToolRequest, args apiclient.GetUsageParams, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.GetUsageWithResponse(ctx, &args, auth))
}

func (t *tools) egressLog(ctx context.Context, req *mcp.CallToolRequest, args struct {
	SandboxID string  `json:"sandbox_id"`
	Limit     *int    `json:"limit,omitempty"`
	Cursor    *string `json:"cursor,omitempty"`
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.GetSandboxEgressWithResponse(ctx, args.SandboxID,
		&apiclient.GetSandboxEgressParams{Limit: args.Limit, Cursor: args.Cursor}, auth))
}

func (t *tools) sandboxUsage(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.GetSandboxUsageWithResponse(ctx, args.SandboxID, auth))
}

// createSSHCredential passes the API's answer, private key included, to
// the agent and nowhere else: nothing here logs a result.
func (t *tools) createSSHCredential(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.SSHTokenRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.CreateSSHTokenWithResponse(ctx, args.SandboxID, apiclient.CreateSSHTokenJSONRequestBody(args.SSHTokenRequest), auth))
}
