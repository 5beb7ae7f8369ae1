package k8s_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that the provider (informer, replenisher, gauges), the
// test kubelet and their SSH servers leave no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
