package api_test

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestPatchIdleSettings (issue 30): PATCH /sandboxes/{id} changes the
// idleness settings given at create; a value out of range is a 422
// problem naming the field and the allowed range, and changes nothing.
func TestPatchIdleSettings(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t, backend, false)
			id := e.createDev().ID
			var got struct {
				Idle      *int  `json:"idle_timeout_minutes"`
				KeepAwake *bool `json:"keep_awake_while_busy"`
				Retention *int  `json:"retention_days"`
			}
			e.send("dev", "PATCH", "/api/v1/sandboxes/"+id, `{"idle_timeout_minutes":2,"keep_awake_while_busy":false,"retention_days":3}`, 200, &got)
			if got.Idle == nil || *got.Idle != 2 || got.KeepAwake == nil || *got.KeepAwake || got.Retention == nil || *got.Retention != 3 {
				t.Fatalf("after PATCH: %+v", got)
			}
			for _, tc := range []struct{ body, field, rangeText string }{
				{`{"idle_timeout_minutes":0}`, "idle_timeout_minutes", "from 1 to the account's idle timeout"},
				{`{"idle_timeout_minutes":100000}`, "idle_timeout_minutes", "from 1 to the account's idle timeout"},
				{`{"retention_days":0}`, "retention_days", "from 1 to "},
				{`{"retention_days":366}`, "retention_days", "from 1 to "},
			} {
				b := e.send("dev", "PATCH", "/api/v1/sandboxes/"+id, tc.body, 422, nil)
				var p struct {
					Errors []struct{ Field, Detail string } `json:"errors"`
				}
				if err := json.Unmarshal(b, &p); err != nil {
					t.Fatal(err)
				}
				if len(p.Errors) != 1 || p.Errors[0].Field != tc.field || !strings.Contains(p.Errors[0].Detail, tc.rangeText) {
					t.Errorf("PATCH %s: %s, want a 422 naming %s and %q", tc.body, b, tc.field, tc.rangeText)
				}
			}
			e.send("dev", "GET", "/api/v1/sandboxes/"+id, "", 200, &got)
			if *got.Idle != 2 || *got.Retention != 3 {
				t.Errorf("refused PATCHes changed the sandbox: %+v", got)
			}
		})
	}
}
