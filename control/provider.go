package control

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/provider/platform"
	"github.com/sbxedge/sbx/control/provider/tart"
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
	if cfg.Tart == nil {
		return lp, nil
	}
	tp, err := openTart(ctx, *cfg.Tart, cfg.Logger)
	if err != nil {
		lp.Close()
		return nil, err
	}
	return &platform.Router{Default: lp, ByPlatform: map[string]provider.Provider{tart.PlatformMacOS: tp}}, nil
}

// TartConfig is this machine as a one-host macOS pool (Config.Tart).
type TartConfig struct {
	// Path is the tart binary (a real one on a Mac, bin/tart elsewhere).
	Path string
	// Env is added to tart's environment (TART_HOME, the fake's delays).
	Env []string
	// Templates are the macOS profiles' base images and setup scripts.
	Templates map[string]tart.Template
	// Suspendable runs VMs with --suspendable (tart 1.8+, macOS 14+).
	Suspendable bool
	// MinFreeDiskGB is preflight's free-disk floor (0: tart.MinFreeDiskGB).
	MinFreeDiskGB int
}

// openTart checks tart (preflight) and builds the one-host provider.
func openTart(ctx context.Context, c TartConfig, logger *slog.Logger) (*tart.Provider, error) {
	d := tart.NewCLI(c.Path, c.Env, logger)
	min := c.MinFreeDiskGB
	if min == 0 {
		min = tart.MinFreeDiskGB
	}
	if err := tart.Preflight(ctx, d, min); err != nil {
		return nil, fmt.Errorf("tart preflight: %w", err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	p, err := tart.New(tart.Config{
		Hosts: []tart.Host{{Name: host, Driver: d}}, Templates: c.Templates, Suspendable: c.Suspendable, Logger: logger,
	})
	if err != nil {
		return nil, err
	}
	// Builds an earlier run left half done go now; old templates stay
	// until `sbx admin templates prune`.
	return p, nil
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
