package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// Inserts that may legitimately collide use ON CONFLICT DO NOTHING and
// report ErrConflict from the row count, matching the Postgres backend,
// where a unique violation would abort the whole transaction.

// conflict maps unique violations to store.ErrConflict.
func conflict(err error, what string) error {
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return fmt.Errorf("%s: %w (%v)", what, store.ErrConflict, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// oneRow is backend.OneRow on a result.
func oneRow(res sql.Result, err error, what string, none error) error {
	var n int64
	if err == nil {
		n = affected(res)
	}
	return backend.OneRow(n, err, what, none)
}

// affected reads RowsAffected, which the sqlite driver always provides.
func affected(res sql.Result) int64 {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return n
}

// LockAccountHolding needs no lock (the transaction holds the write lock)
// and no pipeline (the database is in this process). The count is the
// counter the triggers on sandboxes keep (migration 0020); they run at
// once, so it includes this transaction's own changes. CountHoldingPods
// is backend's.
func (t *tx) LockAccountHolding(ctx context.Context, accountID string) (store.Account, int, error) {
	return t.ScanAccountHolding(t.DB.QueryRow(ctx, backend.AccountHoldingSQL, accountID), accountID)
}

// SandboxForUpdate needs no row lock: the transaction holds the write lock.
func (t *tx) SandboxForUpdate(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := t.Sandbox(ctx, id)
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("lock sandbox: %w", err)
	}
	return sb, nil
}

func (t *tx) InsertEvent(ctx context.Context, e store.Event) error {
	if err := t.Queries.InsertEvent(ctx, e); err != nil {
		return err
	}
	t.eventSandboxes = append(t.eventSandboxes, e.SandboxID)
	return nil
}

// markFull marks an SQLITE_FULL error (the disk, or max_page_count, is
// full) with store.ErrFull.
func markFull(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_FULL && !errors.Is(err, store.ErrFull) {
		return store.Mark(err, store.ErrFull)
	}
	return err
}
