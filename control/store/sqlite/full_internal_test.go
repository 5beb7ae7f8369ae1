package sqlite

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// TestFullDiskIsErrFull: a write the disk has no room for (seen under
// `sbx dev` with its data dir on a full filesystem: POST /sandboxes was
// 500 internal, "commit: database or disk is full (13)") fails with an
// error matching store.ErrFull, so the API can say what is wrong. The
// full disk is max_page_count, set on every pooled connection.
func TestFullDiskIsErrFull(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sbx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	// Hold every pooled connection at once so that each gets the pragma,
	// then give them back.
	conns := make([]*sql.Conn, maxConns)
	for i := range conns {
		if conns[i], err = s.db.Conn(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := conns[i].ExecContext(ctx, "PRAGMA max_page_count = 1"); err != nil { // clamps to the current size
			t.Fatal(err)
		}
	}
	for _, c := range conns {
		_ = c.Close()
	}
	err = s.InTx(ctx, func(tx store.Tx) error {
		return tx.UpsertAccount(ctx, store.Account{ID: "acct-big", Name: strings.Repeat("x", 1<<20), CreatedAt: time.Now()})
	})
	if !errors.Is(err, store.ErrFull) {
		t.Errorf("write to a full database: got %v, want store.ErrFull", err)
	}
}
