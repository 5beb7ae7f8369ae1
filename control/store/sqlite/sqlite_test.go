package sqlite_test

import (
	"database/sql"
	"path/filepath"
	"testing"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/control/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func open(t *testing.T) store.Store {
	t.Helper()
	return storetest.Open(t, sqlite.Open, filepath.Join(t.TempDir(), "sbx.db"))
}

func TestStore(t *testing.T) {
	storetest.Run(t, open)
}

// TestReopen checks that migrations apply once and data survives.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	s, err := sqlite.Open(t.Context(), path, storetest.Logger())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	err = s.InTx(t.Context(), func(tx store.Tx) error {
		return tx.UpsertProfile(t.Context(), store.Profile{Name: "small", Platform: "linux", CPU: 1})
	})
	if err != nil {
		t.Fatalf("UpsertProfile: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s, err = sqlite.Open(t.Context(), path, storetest.Logger())
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	defer s.Close()
	if _, err := s.Profile(t.Context(), "small"); err != nil {
		t.Errorf("Profile after reopen: %v", err)
	}
}

func TestOpenRejectsMemory(t *testing.T) {
	for _, path := range []string{"", ":memory:", "x.db?mode=memory"} {
		if s, err := sqlite.Open(t.Context(), path, nil); err == nil {
			s.Close()
			t.Errorf("Open(%q): got nil error, want one", path)
		}
	}
}

func TestCrashRestart(t *testing.T) {
	storetest.RunCrashRestart(t, func(t testing.TB) string { return filepath.Join(t.TempDir(), "sbx.db") },
		func(t *testing.T, dsn string) store.Store { return storetest.Open(t, sqlite.Open, dsn) })
}

func TestLiveCounterRaw(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sbx.db")
	storetest.RunLiveCounterRaw(t,
		func(t *testing.T) store.Store { return storetest.Open(t, sqlite.Open, path) },
		func(t *testing.T, stmts ...string) {
			t.Helper()
			db, err := sql.Open("sqlite", path+"?_pragma=busy_timeout(10000)")
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = db.Close() }()
			for _, q := range stmts {
				if _, err := db.ExecContext(t.Context(), q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
		},
		[]string{
			`DROP TRIGGER sandboxes_live_insert`,
			`DROP TRIGGER sandboxes_live_update`,
			`DROP TRIGGER sandboxes_live_delete`,
			`DROP TABLE account_live_sandboxes`,
			`DELETE FROM schema_migrations WHERE version = 20`,
		})
}
