package postgres_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/storetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestConnectionLossIsUnavailable: a statement whose connection the
// server ended (pg_terminate_backend, as a failover or restart does) fails
// with an error matching store.ErrUnavailable, from a transaction's
// statement and from the transaction itself, so the API can answer 503
// rather than 500. A missing row stays ErrNotFound, not unavailable.
func TestConnectionLossIsUnavailable(t *testing.T) {
	dsn := testdb.Postgres(t)
	s := storetest.Open(t, postgres.Open, dsn)
	ctx := t.Context()

	if _, err := s.Sandbox(ctx, "sbx-none"); !errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("missing sandbox: got %v, want ErrNotFound and not ErrUnavailable", err)
	}

	var inTx error
	err := s.InTx(ctx, func(tx store.Tx) error {
		terminateBackends(t, dsn)
		_, inTx = tx.Sandbox(ctx, "sbx-none")
		return inTx
	})
	if !errors.Is(inTx, store.ErrUnavailable) {
		t.Errorf("statement on a terminated connection: got %v, want store.ErrUnavailable", inTx)
	}
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("InTx on a terminated connection: got %v, want store.ErrUnavailable", err)
	}
}

// terminateBackends ends every server connection to dsn's database.
func terminateBackends(t *testing.T, dsn string) {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(t.Context(), testdb.AdminURL())
	if err != nil {
		t.Fatalf("admin connect: %v", err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE datname = $1 AND pid <> pg_backend_pid()`, strings.TrimPrefix(u.Path, "/")).Scan(&n); err != nil {
		t.Fatalf("terminate backends: %v", err)
	}
	if n == 0 {
		t.Fatal("terminate backends: none found")
	}
}
