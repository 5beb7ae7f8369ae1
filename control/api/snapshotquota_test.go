package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/store"
)

// TestSnapshotQuotaPerAccount (issue 30): an account's own
// snapshot_limit replaces the deployment's MaxSnapshots for it, lower or
// higher, from the next snapshot; past it the 409 snapshot_quota names
// the account's count and its limit.
func TestSnapshotQuotaPerAccount(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			e := newEnv(t, backend, false, func(c *control.Config) { c.Lifecycle.MaxSnapshots = 2 })
			setLimit := func(n int) {
				t.Helper()
				ctx := context.Background()
				err := e.svc.Store.InTx(ctx, func(tx store.Tx) error {
					a, err := tx.Account(ctx, "acct-dev")
					if err != nil {
						return err
					}
					a.SnapshotLimit = n
					return tx.UpsertAccount(ctx, a)
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			refused := func(count, limit string) {
				t.Helper()
				b := e.send("dev", "POST", "/api/v1/sandboxes/snappy/snapshots", "", 409, nil)
				var p struct {
					Code   string `json:"code"`
					Detail string `json:"detail"`
					Errors []struct{ Field, Detail string }
				}
				if err := json.Unmarshal(b, &p); err != nil {
					t.Fatal(err)
				}
				if p.Code != "snapshot_quota" || !strings.Contains(p.Detail, "has "+count+" snapshots and may keep at most "+limit) ||
					len(p.Errors) != 1 || p.Errors[0].Detail != count+" of at most "+limit+" for this account" {
					t.Fatalf("past the quota: %s; want snapshot_quota naming %s of %s", b, count, limit)
				}
			}
			var sb sbView
			e.send("dev", "POST", "/api/v1/sandboxes", `{"profile":"tuist-linux-small","name":"snappy"}`, 201, &sb)
			e.waitStatus(sb.ID, "ready")

			setLimit(1)
			e.send("dev", "POST", "/api/v1/sandboxes/snappy/snapshots", "", 201, nil)
			refused("1", "1")
			setLimit(3) // above the deployment's 2
			e.send("dev", "POST", "/api/v1/sandboxes/snappy/snapshots", "", 201, nil)
			e.send("dev", "POST", "/api/v1/sandboxes/snappy/snapshots", "", 201, nil)
			refused("3", "3")
			setLimit(0) // back to the deployment's default
			refused("3", "2")
		})
	}
}
