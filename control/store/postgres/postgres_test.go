package postgres_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/storetest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t *testing.T) store.Store {
	t.Helper()
	return storetest.Open(t, postgres.Open, testdb.Postgres(t))
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

// TestOpenConcurrently checks that migrations are idempotent and that two
// replicas starting at once do not race on them.
func TestOpenConcurrently(t *testing.T) {
	url := testdb.Postgres(t)
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			s, err := postgres.Open(t.Context(), url, storetest.Logger())
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range 3 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Open: %v", err)
		}
	}
	s, err := postgres.Open(t.Context(), url, storetest.Logger())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestCrashRestart(t *testing.T) {
	storetest.RunCrashRestart(t, testdb.Postgres, func(t *testing.T, dsn string) store.Store {
		return storetest.Open(t, postgres.Open, dsn)
	})
}

func TestLiveCounterRaw(t *testing.T) {
	dsn := testdb.Postgres(t)
	storetest.RunLiveCounterRaw(t,
		func(t *testing.T) store.Store { return storetest.Open(t, postgres.Open, dsn) },
		func(t *testing.T, stmts ...string) {
			t.Helper()
			conn, err := pgx.Connect(t.Context(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close(context.Background()) }()
			for _, q := range stmts {
				if _, err := conn.Exec(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		[]string{
			`DROP TABLE account_live_sandboxes`,
			`DROP FUNCTION sbx_count_live_sandboxes() CASCADE`, // and its triggers
			`DROP FUNCTION sbx_holds_pod(text)`,
			`DELETE FROM schema_migrations WHERE version = 22`,
		})
}
