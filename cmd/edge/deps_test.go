package main

import (
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestEdgeDependencies keeps the edge binary free of the control plane's
// heavy parts: the store drivers, the job queue and Kubernetes clients.
// The edge is stateless; if it needs something from them, it asks control.
// Of the sandbox's init it links the protocol, not the supervisor.
func TestEdgeDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, ".", append(depcheck.ControlDrivers, depcheck.Module+"/control", depcheck.Module+"/internal/sandboxinit")...)
}
