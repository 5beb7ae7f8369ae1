package deploy_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/testkit/kubetest"
)

// TestMain runs the RBAC and server-side apply tests against one real
// etcd and kube-apiserver, and checks they leave no goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(kubetest.WithCluster(m)) }
