package k8s_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// TestMain runs the package's tests against one real etcd and
// kube-apiserver (started by the first test that asks, each test in a
// namespace of its own) and checks that the provider (informer,
// replenisher, gauges), the test kubelet and their SSH servers leave no
// goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(kubetest.WithCluster(m))
}
