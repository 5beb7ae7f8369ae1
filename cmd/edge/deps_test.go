package main

import (
	"testing"

	"github.com/sbxedge/sbx/internal/depcheck"
)

// TestEdgeDependencies keeps the edge binary free of the control plane's
// heavy parts: the store drivers, the job queue and Kubernetes clients.
// The edge is stateless; if it needs something from them, it asks control.
func TestEdgeDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, ".",
		"github.com/jackc/pgx",
		"github.com/riverqueue/",
		"modernc.org/sqlite",
		"github.com/mattn/go-sqlite3",
		"k8s.io/client-go",
		depcheck.Module+"/control",
	)
}
