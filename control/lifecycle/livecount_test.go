package lifecycle_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestLimitReadsLiveCounter: the concurrency limit is enforced from the
// account's live-sandbox counter (account_live_sandboxes), which counts
// the creating transaction's own changes: a create at the limit is
// refused, a recreate at the limit is not (its predecessor ends in the same
// transaction), a destroy frees a slot, and a counter that says full
// refuses a create even when the rows say otherwise (a count over the
// rows would have admitted it).
func TestLimitReadsLiveCounter(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, backend, lifecycle.Config{}, nil)
			ctx := context.Background()
			h.acct.ConcurrentLimit = 2
			if err := h.st.InTx(ctx, func(tx store.Tx) error { return tx.UpsertAccount(ctx, h.acct) }); err != nil {
				t.Fatal(err)
			}
			refused := func(what string) {
				t.Helper()
				if _, err := h.tryCreate(30); !errors.Is(err, lifecycle.ErrLimit) {
					t.Fatalf("%s: create got %v, want ErrLimit", what, err)
				}
			}
			a, b := h.create(t, 30), h.create(t, 30)
			refused("at the limit")

			// The recreate's own end of a makes room for its successor.
			if _, err := h.m.Recreate(ctx, h.acct, a.ID); err != nil {
				t.Fatalf("recreate at the limit: %v", err)
			}
			refused("after the recreate")

			if _, err := h.m.Delete(ctx, h.acct, b.ID); err != nil {
				t.Fatal(err)
			}
			c := h.create(t, 30)
			if _, err := h.m.Delete(ctx, h.acct, c.ID); err != nil {
				t.Fatal(err)
			}
			// One live sandbox (a's successor) of two allowed; the counter
			// says two.
			setLiveCounter(t, h, 2)
			refused("with the counter at the limit over one live sandbox")
			setLiveCounter(t, h, 1)
			if _, err := h.tryCreate(30); err != nil {
				t.Fatalf("with the counter put back: %v", err)
			}
		})
	}
}

// setLiveCounter writes h's account's live-sandbox count behind the
// store's back.
func setLiveCounter(t *testing.T, h *harness, n int) {
	t.Helper()
	ctx := context.Background()
	const q = `UPDATE account_live_sandboxes SET n = $1 WHERE account_id = $2`
	var res int64
	if strings.HasPrefix(h.dsn, "postgres") {
		conn, err := pgx.Connect(ctx, h.dsn)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		tag, err := conn.Exec(ctx, q, n, h.acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		res = tag.RowsAffected()
	} else {
		db, err := sql.Open("sqlite", h.dsn+"?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = db.Close() }()
		r, err := db.ExecContext(ctx, `UPDATE account_live_sandboxes SET n = ? WHERE account_id = ?`, n, h.acct.ID)
		if err != nil {
			t.Fatal(err)
		}
		res, _ = r.RowsAffected()
	}
	if res != 1 {
		t.Fatalf("set the live counter: %d rows", res)
	}
}
