package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// registerSnapshots adds the checkpoint tools: snapshot, list, restore in
// place, fork, delete, and recreate; register calls it with the shared
// sandbox id schema.
func (t *tools) registerSnapshots(c *contract, id map[string]any, out *outputs) {
	yes, no := true, false
	snapReq, err := c.at("#/components/schemas/SnapshotRequest")
	if err != nil {
		panic(err) // register recovers it as its error
	}
	snapID := map[string]any{"type": "string", "pattern": "^snap-", "description": "A snapshot ID (snap-...), from snapshot_sandbox or list_snapshots."}
	t.add(&mcp.Tool{Name: "snapshot_sandbox", Title: "Snapshot a sandbox's workspace",
		Description: "Take a point-in-time copy of a ready sandbox's workspace while it keeps running " +
			"(POST /api/v1/sandboxes/{id}/snapshots), e.g. before a risky step. The snapshot is the account's, outlives the " +
			"sandbox and is billed as storage until deleted; an account keeps a bounded number (error snapshot_quota names it). " +
			"Roll back with restore_sandbox, or start new sandboxes from it with fork_snapshot.",
		InputSchema: object(snapReq, map[string]any{"sandbox_id": id}, "sandbox_id"), OutputSchema: out.api("/api/v1/sandboxes/{id}/snapshots", "post", "201"),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, withArgs(t.snapshotSandbox))
	t.add(&mcp.Tool{Name: "list_snapshots", Title: "List snapshots",
		Description: "The account's snapshots that were not deleted, newest first (GET /api/v1/snapshots); " +
			"with sandbox_id, only that sandbox's (GET /api/v1/sandboxes/{id}/snapshots).",
		InputSchema: object(nil, map[string]any{"sandbox_id": id}), OutputSchema: out.api("/api/v1/snapshots", "get", "200"),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.listSnapshots))
	t.add(&mcp.Tool{Name: "restore_sandbox", Title: "Roll a sandbox back to a snapshot",
		Description: "Replace the sandbox's workspace with the snapshot's in place and answer once it is ready again " +
			"(POST /api/v1/sandboxes/{id}/restore). Same ID, name, grants and ports; running processes end, declared services " +
			"start again. If it is still restoring after the server's limit, the error is sandbox_waking: wait_sandbox_ready.",
		InputSchema:  object(nil, map[string]any{"sandbox_id": id, "snapshot": snapID}, "sandbox_id", "snapshot"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/restore", "post", "200"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true, OpenWorldHint: &yes},
	}, withArgs(t.restoreSandbox))
	t.add(&mcp.Tool{Name: "fork_snapshot", Title: "Create a sandbox from a snapshot",
		Description: "Create a new sandbox whose workspace starts as the snapshot's, with its profile " +
			"(POST /api/v1/sandboxes with from_snapshot). Fork as many as you like, e.g. to try several approaches from one state. " +
			"It starts pending; call wait_sandbox_ready before using it.",
		InputSchema:  object(nil, map[string]any{"snapshot": snapID}, "snapshot"),
		OutputSchema: out.api("/api/v1/sandboxes", "post", "201"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, withArgs(t.forkSnapshot))
	t.add(&mcp.Tool{Name: "delete_snapshot", Title: "Delete a snapshot",
		Description:  "Delete a snapshot (DELETE /api/v1/snapshots/{snap}); its storage billing stops. Forks made from it are not affected.",
		InputSchema:  object(nil, map[string]any{"snapshot": snapID}, "snapshot"),
		OutputSchema: out.api("/api/v1/snapshots/{snap}", "delete", "200"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
	}, withArgs(t.deleteSnapshot))
	t.add(&mcp.Tool{Name: "recreate_sandbox", Title: "Destroy and recreate a sandbox",
		Description: "Destroy the sandbox and create its successor from the request that created it " +
			"(POST /api/v1/sandboxes/{id}/recreate): a new ID, the same name, labels, profile, grants and services, a fresh workspace. " +
			"It starts pending; call wait_sandbox_ready with the new ID.",
		InputSchema:  object(nil, map[string]any{"sandbox_id": id}, "sandbox_id"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/recreate", "post", "201"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes},
	}, withArgs(t.recreateSandbox))
}

func (t *tools) snapshotSandbox(ctx context.Context, req *mcp.CallToolRequest, args struct {
	apiclient.SnapshotRequest
	SandboxID string `json:"sandbox_id"`
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.CreateSnapshotWithResponse(ctx, args.SandboxID, args.SnapshotRequest, auth))
}

func (t *tools) listSnapshots(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	if args.SandboxID != "" {
		return apiclient.Raw(t.api.ListSandboxSnapshotsWithResponse(ctx, args.SandboxID, auth))
	}
	return apiclient.Raw(t.api.ListSnapshotsWithResponse(ctx, auth))
}

type snapshotArgs struct {
	SandboxID string `json:"sandbox_id"`
	Snapshot  string `json:"snapshot"`
}

func (t *tools) restoreSandbox(ctx context.Context, req *mcp.CallToolRequest, args snapshotArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.RestoreSandboxWithResponse(ctx, args.SandboxID, apiclient.RestoreRequest{Snapshot: args.Snapshot}, auth))
}

func (t *tools) forkSnapshot(ctx context.Context, req *mcp.CallToolRequest, args snapshotArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.CreateSandboxWithResponse(ctx, nil, apiclient.CreateSandbox{FromSnapshot: &args.Snapshot}, auth))
}

func (t *tools) deleteSnapshot(ctx context.Context, req *mcp.CallToolRequest, args snapshotArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.DeleteSnapshotWithResponse(ctx, args.Snapshot, auth))
}

func (t *tools) recreateSandbox(ctx context.Context, req *mcp.CallToolRequest, args sandboxArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.RecreateSandboxWithResponse(ctx, args.SandboxID, auth))
}
