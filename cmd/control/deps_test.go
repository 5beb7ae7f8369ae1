package main

import (
	"slices"
	"testing"

	"github.com/sbxedge/sbx/internal/depcheck"
)

// TestControlDependencies: control links client-go only through the
// provider this binary injects (package control itself does not), and
// never the edge.
func TestControlDependencies(t *testing.T) {
	t.Parallel()
	depcheck.Forbid(t, depcheck.Module+"/control", "k8s.io/client-go", depcheck.Module+"/control/provider/k8s")
	depcheck.Forbid(t, ".", depcheck.Module+"/edge")
	if !slices.Contains(depcheck.Deps(t, "."), depcheck.Module+"/control/provider/k8s") {
		t.Error("cmd/control does not link the k8s provider it injects")
	}
}
