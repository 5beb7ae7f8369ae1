package main

import (
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestSbxDependencies: sbx runs sandboxes on this machine (the local
// provider); the Kubernetes provider and client-go are injected only by
// cmd/control, so the CLI a laptop installs does not carry them.
func TestSbxDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, ".", "k8s.io/client-go", depcheck.Module+"/control/provider/k8s")
}
