package control

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/store"
)

// ProviderOpener builds the provider sandboxes run on. The binary that
// runs them elsewhere than this machine injects one (cmd/control:
// Kubernetes), so this package, and every binary that does not, links no
// cluster client. The provider may implement io.Closer (closed at
// shutdown) and Start(ctx) error (started before reconciliation).
type ProviderOpener interface {
	Open(ctx context.Context, d ProviderDeps) (provider.Provider, error)
}

// ProviderDeps are what a provider may use of control.
type ProviderDeps struct {
	Store    store.Store
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// openProvider builds cfg.Provider's provider, or the local one.
func openProvider(ctx context.Context, cfg Config, st store.Store) (provider.Provider, error) {
	if cfg.Provider != nil {
		return cfg.Provider.Open(ctx, ProviderDeps{Store: st, Registry: cfg.Registry, Logger: cfg.Logger})
	}
	lp, err := local.New(local.Config{
		DataDir: cfg.DataDir, Mode: cfg.ProviderMode, InitPath: cfg.SandboxInit, InitFallback: cfg.SandboxInitFallback, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("start local provider: %w", err)
	}
	return lp, nil
}

// startProvider subscribes lifecycle to pod stops and starts the
// provider's background work (the k8s Pod Watcher and warm pool), before
// reconciliation reads state.
func (s *Service) startProvider(ctx context.Context) error {
	s.Life.WatchStops()
	if st, ok := s.Provider.(interface{ Start(context.Context) error }); ok {
		if err := st.Start(ctx); err != nil {
			return fmt.Errorf("start provider: %w", err)
		}
	}
	return nil
}

// providerName is what webhook messages say sandboxes run on: the local
// provider on this machine (named as its host), or what an injected
// provider calls itself (a Name method), with no single host.
func providerName(cfg Config, p provider.Provider) (name, host string) {
	if cfg.Provider == nil {
		h, _ := os.Hostname()
		return "local", h
	}
	if n, ok := p.(interface{ Name() string }); ok {
		return n.Name(), ""
	}
	return "external", ""
}
