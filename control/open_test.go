package control_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/standalone"
)

// TestOpenStoreFailure: a store that cannot be opened (here, the SQLite
// file's path is a directory) is an error from Open, not a panic in its
// cleanup.
func TestOpenStoreFailure(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sbx.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	svc, err := control.Open(context.Background(), standalone.Fill(control.Config{DataDir: dir, APIAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0"}))
	if err == nil {
		_ = svc.Shutdown(context.Background())
		t.Fatal("Open on a directory for the database succeeded; want the store's error")
	}
	t.Log(err)
}
