package control

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
)

// ProviderOpener builds the provider sandboxes run on. The binary
// injects it (cmd/control: Kubernetes; sbx dev: standalone.Local), so
// each links only the provider it runs. The provider may implement io.Closer (closed at
// shutdown) and Start(ctx) error (started before reconciliation).
type ProviderOpener interface {
	Open(ctx context.Context, d ProviderDeps) (provider.Provider, error)
}

// ProviderDeps are what a provider may use of control.
type ProviderDeps struct {
	// DataDir is Config.DataDir, where a provider on this machine keeps
	// its sandboxes.
	DataDir  string
	Store    store.Store
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// openProvider builds cfg.Provider's provider.
func openProvider(ctx context.Context, cfg Config, st store.Store) (provider.Provider, error) {
	return cfg.Provider.Open(ctx, ProviderDeps{DataDir: cfg.DataDir, Store: st, Registry: cfg.Registry, Logger: cfg.Logger})
}

// StoreOpener opens the store in dataDir when no DatabaseURL is given
// (sbx dev: standalone.SQLite), so only the binary that runs it links
// its driver.
type StoreOpener func(ctx context.Context, dataDir string, log *slog.Logger) (store.Store, error)

// openStore opens Postgres at cfg.DatabaseURL, or else cfg.Store's.
func openStore(ctx context.Context, cfg Config) (store.Store, error) {
	if cfg.DatabaseURL == "" {
		return cfg.Store(ctx, cfg.DataDir, cfg.Logger)
	}
	pg, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.Logger)
	if err != nil {
		// Not pg: a nil *postgres.Store would be a non-nil store.Store,
		// and closeParts would call Close on it.
		return nil, err
	}
	return pg, nil
}

// startProvider subscribes lifecycle to pod stops and starts the
// provider's background work (the k8s Pod Watcher and warm pool), before
// reconciliation reads state.
func (s *Service) startProvider(ctx context.Context) error {
	s.Life.WatchStops()
	s.Life.WatchProgress()
	if st, ok := s.Provider.(interface{ Start(context.Context) error }); ok {
		if err := st.Start(ctx); err != nil {
			return fmt.Errorf("start provider: %w", err)
		}
	}
	return nil
}

// providerName is what webhook messages say sandboxes run on: what the
// provider calls itself (a Name method) and, for one on a single
// machine, that machine (a Host method).
func providerName(p provider.Provider) (name, host string) {
	name = "external"
	if n, ok := p.(interface{ Name() string }); ok {
		name = n.Name()
	}
	if h, ok := p.(interface{ Host() string }); ok {
		host = h.Host()
	}
	return name, host
}
