package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// registerStopStart adds the tools that park a sandbox and bring it back,
// and ensure_sandbox; register calls it with the shared sandbox id schema.
func (t *tools) registerStopStart(c *contract, id map[string]any, out *outputs) {
	yes, no := true, false
	sandboxOnly := object(nil, map[string]any{"sandbox_id": id}, "sandbox_id")
	t.add(&mcp.Tool{Name: "suspend_sandbox", Title: "Stop (suspend) a sandbox",
		Description: "Park a sandbox (POST /api/v1/sandboxes/{id}/suspend): its workspace is kept, its processes end, " +
			"compute billing stops and its deadline clock pauses. It answers while the sandbox is suspending or once suspended; " +
			"calling it again is safe. Traffic wakes it again unless it has wake_on_traffic false; resume_sandbox always does.",
		InputSchema: sandboxOnly, OutputSchema: out.api("/api/v1/sandboxes/{id}/suspend", "post", "200"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
	}, withArgs(t.suspendSandbox))
	t.add(&mcp.Tool{Name: "resume_sandbox", Title: "Start (resume) a sandbox",
		Description: "Bring a stopped sandbox back and answer once it is ready (POST /api/v1/sandboxes/{id}/resume): files are as they were, " +
			"declared services start again. A ready sandbox answers at once. If it is still starting after the server's limit, " +
			"the error is sandbox_waking: call again.",
		InputSchema: sandboxOnly, OutputSchema: out.api("/api/v1/sandboxes/{id}/resume", "post", "200"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &yes},
	}, withArgs(t.resumeSandbox))

	name, err := c.param("/api/v1/sandboxes/by-name/{name}", "put", "name")
	if err != nil {
		panic(err) // register recovers it as its error
	}
	create, err := c.at("#/components/schemas/CreateSandbox")
	if err != nil {
		panic(err)
	}
	t.add(&mcp.Tool{Name: "ensure_sandbox", Title: "Get or create a sandbox by name",
		Description: "The account's live sandbox of this name, or a new one created from the other arguments when there is none " +
			"(PUT /api/v1/sandboxes/by-name/{name}). Safe to call again and in parallel: one name, one sandbox. " +
			"A new one starts pending; call wait_sandbox_ready before using it.",
		InputSchema:  object(create, map[string]any{"name": name}, "name"),
		OutputSchema: out.api("/api/v1/sandboxes/by-name/{name}", "put", "200"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, IdempotentHint: true, OpenWorldHint: &yes},
	}, withArgs(t.ensureSandbox))
}

func (t *tools) suspendSandbox(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.SuspendSandboxWithResponse(ctx, args.SandboxID, auth))
}

func (t *tools) resumeSandbox(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ResumeSandboxWithResponse(ctx, args.SandboxID, auth))
}

func (t *tools) ensureSandbox(ctx context.Context, req *mcp.CallToolRequest, args apiclient.CreateSandbox, auth apiclient.RequestEditorFn) (any, error) {
	name := ""
	if args.Name != nil {
		name = *args.Name
	}
	return apiclient.Raw(t.api.EnsureSandboxWithResponse(ctx, name, args, auth))
}
