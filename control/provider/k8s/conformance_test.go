package k8s_test

import (
	"testing"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/providertest"
)

// TestConformance runs the provider suite on the real kube-apiserver, as
// control's ServiceAccount, with the test kubelet running the pods.
func TestConformance(t *testing.T) {
	t.Parallel()
	providertest.Run(t, func(t *testing.T) providertest.Env {
		e := newEnv(t, nil)
		shape, ok := e.catalog.Shape("tuist-linux-medium")
		if !ok {
			t.Fatal("no profile tuist-linux-medium")
		}
		return providertest.Env{Provider: e.prov, Spec: func(s provider.Spec) provider.Spec {
			s.Profile, s.Platform, s.CPU, s.MemoryMB, s.DiskGB, s.Image = shape.Name, shape.Platform, shape.CPU, shape.MemoryMB, shape.DiskGB, shape.Image
			return s
		}}
	})
}
