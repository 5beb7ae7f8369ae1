package postgres

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// Inserts that may legitimately collide use ON CONFLICT DO NOTHING and
// report ErrConflict from the row count, instead of letting a unique
// violation abort the transaction: the caller can then still read the
// existing row (an idempotent retry) in the same transaction.

func orNow(t time.Time) time.Time {
	if t.IsZero() {
		return time.Now()
	}
	return t
}

// CountHoldingPods reads the account's counter after applying this
// transaction's own changes to it (countLiveNowSQL): call it under
// LockAccount.
func (t *tx) CountHoldingPods(ctx context.Context, accountID string) (int, error) {
	b := &pgx.Batch{}
	b.Queue(countLiveNowSQL)
	b.Queue(backend.HoldingPodsSQL, accountID)
	br := t.ptx.SendBatch(ctx, b)
	var n int
	_, err := br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&n)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("count live sandboxes of %s: %w", accountID, markUnavailable(err))
	}
	return n, nil
}

func (t *tx) SandboxForUpdate(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := t.ScanSandbox(t.q.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = $1 FOR UPDATE`, id))
	if err != nil {
		return store.Sandbox{}, notFound(err, "lock sandbox "+id)
	}
	return sb, nil
}

func (t *tx) InsertEvent(ctx context.Context, e store.Event) error {
	if err := t.Queries.InsertEvent(ctx, e); err != nil {
		return err
	}
	// Signalled after the commit (InTx), not inside the transaction: a
	// NOTIFY in a transaction takes Postgres's one database-wide notify
	// lock at commit, so every create's commit queued behind every other's
	// while still holding its account's quota lock. Nothing needs the
	// signal atomic with the row: a subscriber re-reads the store on every
	// signal (and on its keep-alive tick), so a late signal finds the row
	// committed and a lost one (a crash between commit and notify) delays
	// it by at most that tick.
	if !slices.Contains(*t.notify, e.SandboxID) {
		*t.notify = append(*t.notify, e.SandboxID)
	}
	return nil
}
