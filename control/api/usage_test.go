package api_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestSandboxUsageLines: after a create and a delete, the sandbox's usage
// shows its one compute line, closed with explicit_delete; another
// account sees not found, like every other "not yours".
func TestSandboxUsageLines(t *testing.T) {
	e := newEnv(t, "sqlite", false)
	sb := e.createDev()
	for deadline := time.Now().Add(time.Minute); sb.Status != "ready"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s still %s after a minute", sb.ID, sb.Status)
		}
		_, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID, nil)
		_ = json.Unmarshal(b, &sb)
	}
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	code, _, b := e.do("dev", "GET", "/api/v1/sandboxes/"+sb.ID+"/usage", nil)
	if code != 200 {
		t.Fatalf("usage: %d %s", code, b)
	}
	var u struct {
		Lines []struct {
			Kind      string     `json:"kind"`
			EndedAt   *time.Time `json:"ended_at"`
			EndReason string     `json:"end_reason"`
			Seconds   float64    `json:"seconds"`
		} `json:"lines"`
		Compute float64 `json:"compute_seconds"`
	}
	if err := json.Unmarshal(b, &u); err != nil {
		t.Fatal(err)
	}
	if len(u.Lines) != 1 || u.Lines[0].Kind != "compute" || u.Lines[0].EndedAt == nil || u.Lines[0].EndReason != "explicit_delete" ||
		u.Compute != u.Lines[0].Seconds {
		t.Fatalf("usage lines %s; want one closed compute line with reason explicit_delete", b)
	}
	if code, _, b := e.do("other", "GET", "/api/v1/sandboxes/"+sb.ID+"/usage", nil); code != 404 {
		t.Fatalf("other account: %d %s; want 404", code, b)
	}
	code, _, b = e.do("dev", "GET", "/api/v1/profiles", nil)
	if code != 200 || !strings.Contains(string(b), `"tuist-linux-small"`) {
		t.Fatalf("profiles: %d %s", code, b)
	}
}
