package control_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// TestMain fails the package if a test leaves a goroutine running: every
// goroutine here has an owner that stops it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(kubetest.WithCluster(m)) }
