package main

import (
	"testing"

	"github.com/sbxedge/sbx/internal/depcheck"
)

// TestInitDependencies keeps the sandbox's init small: it runs inside
// every sandbox and links none of the control plane, the edge or their
// drivers.
func TestInitDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, ".",
		"github.com/jackc/pgx",
		"github.com/riverqueue/",
		"modernc.org/sqlite",
		"k8s.io/client-go",
		"github.com/prometheus/",
		depcheck.Module+"/control",
		depcheck.Module+"/edge",
	)
}
