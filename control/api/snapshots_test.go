package api_test

import (
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control"
)

// TestSnapshotsAPI drives snapshots over REST and MCP, every answer
// checked against the OpenAPI document: a snapshot is taken while the
// sandbox runs, restore_sandbox rolls a broken workspace back,
// fork_snapshot starts a sandbox with the file, the quota is a 409
// naming its limit, another account sees none of it, delete_snapshot
// removes one, and recreate_sandbox replaces a sandbox with a new ID.
func TestSnapshotsAPI(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false, func(c *control.Config) { c.Lifecycle.MaxSnapshots = 2 })
	var sb sbView
	e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"snappy"}`, 201, &sb)
	e.waitStatus(sb.ID, "ready")
	e.send("dev", "PUT", "/api/v1/sandboxes/snappy/files/notes.txt", "before\n", 201, nil)

	var snap struct {
		ID        string `json:"id"`
		SandboxID string `json:"sandbox_id"`
		Status    string `json:"status"`
	}
	e.send("dev", "POST", "/api/v1/sandboxes/snappy/snapshots", `{"name":"before","labels":{"step":"1"}}`, 201, &snap)
	if snap.Status != "ready" || snap.SandboxID != sb.ID {
		t.Fatalf("snapshot %+v; want ready, of %s", snap, sb.ID)
	}
	e.send("other", "GET", "/api/v1/snapshots/"+snap.ID, "", 404, nil)
	if b := e.send("other", "GET", "/api/v1/snapshots", "", 200, nil); strings.Contains(string(b), snap.ID) {
		t.Fatalf("another account lists %s: %s", snap.ID, b)
	}
	if b := e.send("dev", "GET", "/api/v1/sandboxes/snappy/snapshots", "", 200, nil); !strings.Contains(string(b), snap.ID) {
		t.Fatalf("the sandbox's list lacks %s: %s", snap.ID, b)
	}
	e.send("dev", "POST", "/api/v1/sandboxes/snappy/restore", `{"snapshot":"snap-nope"}`, 422, nil)
	e.send("dev", "POST", "/api/v1/sandboxes", `{"from_snapshot":"snap-nope"}`, 422, nil)

	s := e.mcpSession(t, "Bearer "+e.tokens["dev"], nil)
	e.send("dev", "PUT", "/api/v1/sandboxes/snappy/files/notes.txt", "broken\n", 201, nil)
	if got, isErr := call(t, s, "restore_sandbox", map[string]any{"sandbox_id": "snappy", "snapshot": snap.ID}); isErr || got["status"] != "ready" {
		t.Fatalf("restore_sandbox: %v", got)
	}
	if b := e.send("dev", "GET", "/api/v1/sandboxes/snappy/files/notes.txt", "", 200, nil); string(b) != "before\n" {
		t.Fatalf("notes after restore_sandbox %q", b)
	}
	fork, isErr := call(t, s, "fork_snapshot", map[string]any{"snapshot": snap.ID})
	forkID, _ := fork["id"].(string)
	if isErr || forkID == "" || fork["from_snapshot"] != snap.ID {
		t.Fatalf("fork_snapshot: %v", fork)
	}
	e.waitStatus(forkID, "ready")
	if b := e.send("dev", "GET", "/api/v1/sandboxes/"+forkID+"/files/notes.txt", "", 200, nil); string(b) != "before\n" {
		t.Fatalf("notes of the fork %q", b)
	}
	if got, isErr := call(t, s, "snapshot_sandbox", map[string]any{"sandbox_id": forkID, "name": "fork-1"}); isErr || got["status"] != "ready" {
		t.Fatalf("snapshot_sandbox: %v", got)
	}
	var p problemDoc
	e.send("dev", "POST", "/api/v1/sandboxes/"+forkID+"/snapshots", "", 409, &p)
	if p.Code != "snapshot_quota" || !strings.Contains(p.Detail, "at most 2") {
		t.Fatalf("third snapshot: %+v; want snapshot_quota naming 2", p)
	}
	if got, isErr := call(t, s, "list_snapshots", map[string]any{}); isErr || len(got["snapshots"].([]any)) != 2 {
		t.Fatalf("list_snapshots: %v", got)
	}
	if got, isErr := call(t, s, "delete_snapshot", map[string]any{"snapshot": snap.ID}); isErr || got["status"] != "deleted" {
		t.Fatalf("delete_snapshot: %v", got)
	}
	next, isErr := call(t, s, "recreate_sandbox", map[string]any{"sandbox_id": "snappy"})
	if isErr || next["id"] == sb.ID || next["recreated_from"] != sb.ID || next["name"] != "snappy" {
		t.Fatalf("recreate_sandbox: %v", next)
	}
	var old struct {
		RecreatedAs string `json:"recreated_as"`
		EndReason   string `json:"end_reason"`
	}
	e.send("dev", "GET", "/api/v1/sandboxes/"+sb.ID, "", 200, &old)
	if old.RecreatedAs != next["id"] || old.EndReason != "recreate" {
		t.Fatalf("the recreated sandbox reads %+v", old)
	}
}
