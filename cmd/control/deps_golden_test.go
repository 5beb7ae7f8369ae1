package main

import (
	"runtime"
	"testing"

	"github.com/sbxedge/sbx/internal/testkit/depcheck"
)

// TestDependencyAllowList: every package this binary links is named in
// testdata/deps.txt, the reviewed list (linux/amd64, what CI builds and
// production runs; another platform links other standard packages).
func TestDependencyAllowList(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("the allow-list is for linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	depcheck.Golden(t, ".", "testdata/deps.txt")
}
