// Package controltest starts a control plane for tests: opened, with the
// dev account seeded, started, and shut down when the test ends.
package controltest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/standalone"
)

// Start runs control with cfg (an empty DataDir is a fresh temporary
// directory, an empty APIAddr a free loopback port) and returns it with
// the dev account's token. It is shut down at the end of the test, after
// the cleanups registered later (an edge in front of it stops first).
func Start(t testing.TB, cfg control.Config) (*control.Service, string) {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.APIAddr == "" {
		cfg.APIAddr = "127.0.0.1:0"
	}
	ctx := context.Background()
	svc, err := control.Open(ctx, standalone.Fill(cfg))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := svc.Shutdown(sctx); err != nil {
			t.Errorf("control shutdown: %v", err)
		}
	})
	tok, _, err := devseed.Seed(ctx, svc.Store, "", filepath.Join(cfg.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return svc, tok
}
