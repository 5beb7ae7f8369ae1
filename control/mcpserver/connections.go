package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// registerConnections adds list_connections: who is connected to a
// sandbox (or to any sandbox of the account) and with which client.
func (t *tools) registerConnections(id map[string]any, out *outputs) {
	yes := true
	sandbox := map[string]any{}
	for k, v := range id {
		sandbox[k] = v
	}
	sandbox["description"] = "A sandbox's ID or name; omit for every sandbox of the account."
	t.add(&mcp.Tool{Name: "list_connections", Title: "List connections",
		Description: "Who is connected, from where and with which client (VS Code, JetBrains, ssh, a browser, an MCP client...): " +
			"SSH connections, preview browser sessions, terminals, exec streams, newest first " +
			"(GET /api/v1/sandboxes/{id}/connections, or GET /api/v1/connections without sandbox_id). live=true keeps those open now.",
		InputSchema: object(nil, map[string]any{
			"sandbox_id": sandbox,
			"live":       map[string]any{"type": "boolean", "description": "Only connections open now."},
		}),
		OutputSchema: out.api("/api/v1/connections", "get", "200"),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: &yes},
	}, withArgs(t.listConnections))
}

func (t *tools) listConnections(ctx context.Context, req *mcp.CallToolRequest, args struct {
	SandboxID string `json:"sandbox_id"`
	Live      *bool  `json:"live"`
}, auth apiclient.RequestEditorFn) (any, error) {
	if args.SandboxID != "" {
		return apiclient.Raw(t.api.ListSandboxConnectionsWithResponse(ctx, args.SandboxID, &apiclient.ListSandboxConnectionsParams{Live: args.Live}, auth))
	}
	return apiclient.Raw(t.api.ListConnectionsWithResponse(ctx, &apiclient.ListConnectionsParams{Live: args.Live}, auth))
}
