package main

import (
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestInitDependencies keeps the sandbox's init small: it runs inside
// every sandbox and links none of the control plane, the edge or their
// drivers.
func TestInitDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, ".", append(depcheck.ControlDrivers, "github.com/prometheus/", depcheck.Module+"/control", depcheck.Module+"/edge")...)
}
