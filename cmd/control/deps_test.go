package main

import (
	"slices"
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestControlDependencies: control links client-go only through the
// provider this binary injects (package control itself does not), and
// never the edge. Package control links no backend of one machine either,
// and this binary, a replica, links none: not SQLite, not the local
// provider (nor its SSH server), not activity in memory, not the
// sandbox's init (only its protocol).
func TestControlDependencies(t *testing.T) {
	t.Parallel()
	oneMachine := []string{
		"modernc.org/sqlite", "github.com/mattn/go-sqlite3", "github.com/gliderlabs/ssh",
		depcheck.Module + "/control/store/sqlite", depcheck.Module + "/control/provider/local",
		depcheck.Module + "/control/standalone", depcheck.Module + "/activity/memstore",
		depcheck.Module + "/internal/sandboxinit",
	}
	depcheck.Forbid(t, depcheck.Module+"/control", append(oneMachine, "k8s.io/client-go", depcheck.Module+"/control/provider/k8s")...)
	depcheck.Forbid(t, ".", append(oneMachine, depcheck.Module+"/edge")...)
	if !slices.Contains(depcheck.Deps(t, "."), depcheck.Module+"/control/provider/k8s") {
		t.Error("cmd/control does not link the k8s provider it injects")
	}
}
