package storetest

import (
	"context"
	"log/slog"
	"os"
	"testing"

	"github.com/sbxedge/sbx/control/store"
)

// Logger is a backend's logger in its tests: debug lines on stderr with
// -v and SBX_TEST_STORE_LOG set, nothing otherwise.
func Logger() *slog.Logger {
	if testing.Verbose() && os.Getenv("SBX_TEST_STORE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// Open opens the backend's database at dsn with open (given the test's
// context and Logger) and closes it when the test ends, failing the test
// if either fails: the open function Run wants, once the backend says
// where its database is.
func Open[S store.Store](t *testing.T, open func(ctx context.Context, dsn string, log *slog.Logger) (S, error), dsn string) store.Store {
	t.Helper()
	s, err := open(t.Context(), dsn, Logger())
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}
