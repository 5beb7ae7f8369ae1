package api_test

import (
	"context"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
)

// TestDeleteSandboxWithSnapshots (issue 30): a sandbox's snapshots
// outlive it by default (the account's data) and are deleted with it,
// lines closed, only when asked: ?delete_snapshots=true over REST, and
// destroy_sandbox's delete_snapshots over MCP. A bad value is a 400 that
// deletes nothing.
func TestDeleteSandboxWithSnapshots(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t, backend, false)
			type snapDoc struct {
				ID     string `json:"id"`
				Status string `json:"status"`
			}
			withSnaps := func(name string, n int) (string, []string) {
				var sb sbView
				e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"`+name+`"}`, 201, &sb)
				e.waitStatus(sb.ID, "ready")
				var ids []string
				for range n {
					var s snapDoc
					e.send("dev", "POST", "/api/v1/sandboxes/"+name+"/snapshots", "", 201, &s)
					ids = append(ids, s.ID)
				}
				return sb.ID, ids
			}
			status := func(id string) string {
				var s snapDoc
				e.send("dev", "GET", "/api/v1/snapshots/"+id, "", 200, &s)
				return s.Status
			}

			keptID, kept := withSnaps("kept", 1)
			e.send("dev", "DELETE", "/api/v1/sandboxes/kept?delete_snapshots=maybe", "", 400, nil)
			e.waitStatus(keptID, "ready")
			e.send("dev", "DELETE", "/api/v1/sandboxes/kept", "", 200, nil)
			if got := status(kept[0]); got != "ready" {
				t.Fatalf("snapshot of a sandbox deleted without the flag is %s, want ready (kept)", got)
			}

			_, gone := withSnaps("gone", 2)
			e.send("dev", "DELETE", "/api/v1/sandboxes/gone?delete_snapshots=true", "", 200, nil)
			for _, id := range gone {
				if got := status(id); got != "deleted" {
					t.Errorf("snapshot %s after delete_snapshots=true is %s, want deleted", id, got)
				}
				lines, err := e.svc.Store.SnapshotSessions(context.Background(), id)
				if err != nil || len(lines) != 1 || lines[0].EndedAt == nil || lines[0].EndReason != lifecycle.ReasonSnapshotDeleted {
					t.Errorf("lines of %s: %+v %v; want one closed snapshot_deleted", id, lines, err)
				}
			}

			_, mcpSnaps := withSnaps("viamcp", 1)
			s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
			if got, isErr := call(t, s, "destroy_sandbox", map[string]any{"sandbox_id": "viamcp", "delete_snapshots": true}); isErr {
				t.Fatalf("destroy_sandbox: %v", got)
			}
			if got := status(mcpSnaps[0]); got != "deleted" {
				t.Errorf("snapshot after destroy_sandbox with delete_snapshots is %s", got)
			}
			if got := status(kept[0]); got != "ready" {
				t.Errorf("the other sandbox's snapshot is %s, want ready", got)
			}
		})
	}
}
