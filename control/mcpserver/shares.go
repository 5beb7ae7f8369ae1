package mcpserver

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// addShareTools adds the share link tools: an agent hands a person one
// preview for a while, without an account.
func (t *tools) addShareTools(c *contract, out *outputs, id map[string]any, must func(map[string]any, error) map[string]any) {
	yes, no := true, false
	port := must(c.param("/api/v1/sandboxes/{id}/ports/{port}/shares", "post", "port"))
	port["description"] = "The exposed port to share."
	t.add(&mcp.Tool{Name: "share_preview", Title: "Share a preview",
		Description: "Make a link that opens one exposed port in a browser with no login, for expires_in_minutes (1 to 10080) " +
			"(POST /api/v1/sandboxes/{id}/ports/{port}/shares). The url in the result carries the link's secret and is shown only " +
			"this once: hand it to the person, and revoke it with revoke_preview_share when they are done.",
		InputSchema: object(must(c.at("#/components/schemas/ShareRequest")), map[string]any{"sandbox_id": id, "port": port},
			"sandbox_id", "port"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/ports/{port}/shares", "post", "201"),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &no, OpenWorldHint: &yes},
	}, withArgs(t.sharePreview))

	t.add(&mcp.Tool{Name: "list_preview_shares", Title: "List a preview's share links",
		Description:  "The share links of one exposed port, newest first, with their state; never their secrets (GET /api/v1/sandboxes/{id}/ports/{port}/shares).",
		InputSchema:  object(nil, map[string]any{"sandbox_id": id, "port": port}, "sandbox_id", "port"),
		OutputSchema: out.api("/api/v1/sandboxes/{id}/ports/{port}/shares", "get", "200"),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.listShares))

	t.add(&mcp.Tool{Name: "revoke_preview_share", Title: "Revoke a share link",
		Description: "Revoke a share link (DELETE /api/v1/sandboxes/{id}/ports/{port}/shares/{share_id}): what it opened is closed " +
			"within seconds and the link then says it was revoked. Idempotent.",
		InputSchema: object(nil, map[string]any{"sandbox_id": id, "port": port,
			"share_id": map[string]any{"type": "string", "description": "The share link's id (from share_preview or list_preview_shares)."}},
			"sandbox_id", "port", "share_id"),
		OutputSchema: typed[shareRevoked](out),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
	}, withArgs(t.revokeShare))
}

type shareArgs struct {
	sandboxArgs
	Port int `json:"port"`
}

func (t *tools) sharePreview(ctx context.Context, req *mcp.CallToolRequest, args struct {
	shareArgs
	apiclient.ShareRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.CreateShareWithResponse(ctx, args.SandboxID, args.Port, args.ShareRequest, auth))
}

func (t *tools) listShares(ctx context.Context, req *mcp.CallToolRequest, args shareArgs, auth apiclient.RequestEditorFn) (any, error) {
	return apiclient.Raw(t.api.ListSharesWithResponse(ctx, args.SandboxID, args.Port, auth))
}

// shareRevoked is revoke_preview_share's result: the API's 204 has no body.
type shareRevoked struct {
	SandboxID string `json:"sandbox_id"`
	ShareID   string `json:"share_id"`
	Revoked   bool   `json:"revoked"`
}

func (t *tools) revokeShare(ctx context.Context, req *mcp.CallToolRequest, args struct {
	shareArgs
	ShareID string `json:"share_id"`
}, auth apiclient.RequestEditorFn) (any, error) {
	if _, err := apiclient.Result(t.api.RevokeShareWithResponse(ctx, args.SandboxID, args.Port, args.ShareID, auth)); err != nil {
		return nil, err
	}
	return shareRevoked{SandboxID: args.SandboxID, ShareID: args.ShareID, Revoked: true}, nil
}
