package k8stest

import (
	"context"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
)

// Opener injects the k8s provider into control.Config.Provider, as
// cmd/control does, for tests that pass client-go's fakes in the Setup.
type Opener k8s.Setup

// Open implements control.ProviderOpener.
func (o Opener) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	return k8s.Open(ctx, k8s.Setup(o), d.Store, d.Registry, d.Logger)
}
