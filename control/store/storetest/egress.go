package storetest

import (
	"context"
	"testing"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// testSandboxNetwork: a sandbox's own egress policy round-trips through
// insert and update, and nil (follow the profile's) stays nil.
func testSandboxNetwork(t *testing.T, ctx context.Context, s store.Store) {
	own := sandbox("a", "sb-net", t0)
	own.Network = &egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"github.com", "*.npmjs.org:443"}}
	plain := sandbox("a", "sb-plain", t0)
	insertSandboxes(t, s, own, plain)
	wantRead(t, "own policy", own)(s.Sandbox(ctx, own.ID))
	wantRead(t, "profile's policy", plain)(s.Sandbox(ctx, plain.ID))

	inTx(t, s, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, plain.ID)
		if err != nil {
			return err
		}
		cur.Network = &egresspolicy.Spec{Egress: egresspolicy.None}
		plain = cur
		return tx.UpdateSandbox(ctx, cur)
	})
	wantRead(t, "policy set by update", plain)(s.Sandbox(ctx, plain.ID))
	inTx(t, s, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, own.ID)
		if err != nil {
			return err
		}
		cur.Network = nil
		own = cur
		return tx.UpdateSandbox(ctx, cur)
	})
	wantRead(t, "policy cleared by update", own)(s.Sandbox(ctx, own.ID))
}
