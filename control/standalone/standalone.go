// Package standalone holds the backends control runs on when it is the
// only replica, on one machine: SQLite in its data dir, the local
// provider (sandboxes are folders and processes here) and activity in
// this process's memory. `sbx dev` and tests inject them into
// control.Config; the replica binary, cmd/control, runs on Postgres,
// Redis and Kubernetes and links none of them.
package standalone

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/provider/platform"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/sqlite"
)

// Fill returns cfg with the one-machine backend of each part it leaves
// to choose: SQLite in DataDir without a DatabaseURL, activity in memory
// without a RedisURL, the local provider in its default (embedded) mode
// without a Provider.
func Fill(cfg control.Config) control.Config {
	if cfg.DatabaseURL == "" && cfg.Store == nil {
		cfg.Store = SQLite
	}
	if cfg.RedisURL == "" && cfg.Activity == nil {
		cfg.Activity = memstore.New(nil)
	}
	if cfg.Provider == nil {
		cfg.Provider = Local{}
	}
	return cfg
}

// SQLite opens the store in dataDir/sbx.db (control.StoreOpener).
func SQLite(ctx context.Context, dataDir string, log *slog.Logger) (store.Store, error) {
	s, err := sqlite.Open(ctx, filepath.Join(dataDir, "sbx.db"), log)
	if err != nil {
		// Not s: a nil *sqlite.Store would be a non-nil store.Store.
		return nil, err
	}
	return s, nil
}

// Local runs sandboxes on this machine, under control's data dir
// (control.ProviderOpener).
type Local struct {
	// Mode is the sandbox's SSH server: local.ModeEmbedded (default) or
	// local.ModeSSHD.
	Mode string
	// InitPath and InitFallback are local.Config's: the sbx-init that
	// sshd runs for the sandbox's services, and the running program's
	// stand-in for it.
	InitPath     string
	InitFallback []string
	// Tart, when set, makes this machine a one-host macOS pool as well:
	// macOS sandboxes run as tart VMs driven by that binary (sbx dev
	// --tart), beside the local provider's Linux ones.
	Tart *TartConfig
}

// Open implements control.ProviderOpener.
func (l Local) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	lp, err := local.New(local.Config{
		DataDir: d.DataDir, Mode: l.Mode, InitPath: l.InitPath, InitFallback: l.InitFallback, Logger: d.Logger,
	})
	if err != nil {
		return nil, fmt.Errorf("start local provider: %w", err)
	}
	if l.Tart == nil {
		return lp, nil
	}
	tp, err := openTart(ctx, *l.Tart, d.Logger)
	if err != nil {
		lp.Close()
		return nil, err
	}
	return &platform.Router{Default: lp, ByPlatform: map[string]provider.Provider{tart.PlatformMacOS: tp}}, nil
}

// TartConfig is this machine as a one-host macOS pool (Local.Tart).
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
	// Bundles, when set, takes a suspended VM's bundle off this machine
	// (object storage, tart/s3bundles), moved in this process by the
	// driver (tart.WithBundles), and frees its disk; nil keeps
	// suspended VMs on this machine's disk (their slot is freed either
	// way).
	Bundles tart.BundleStore
}

// openTart checks tart (preflight) and builds the one-host provider.
func openTart(ctx context.Context, c TartConfig, logger *slog.Logger) (*tart.Provider, error) {
	d := tart.NewCLI(c.Path, c.Env, logger)
	min := c.MinFreeDiskGB
	if min == 0 {
		min = tart.MinFreeDiskGB
	}
	info, err := tart.Preflight(ctx, d, min)
	if err != nil {
		return nil, fmt.Errorf("tart preflight: %w", err)
	}
	if info.NoSuspend != "" && c.Suspendable {
		logger.Warn("macOS sandboxes will not be suspended when idle", "why", info.NoSuspend)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "localhost"
	}
	// Builds an earlier run left half done go at Start; old templates
	// stay until they are pruned.
	return tart.New(tart.Config{
		Hosts: []tart.Host{{Name: host, Driver: tart.WithBundles(d, c.Bundles), NoSuspend: info.NoSuspend}}, Templates: c.Templates, Suspendable: c.Suspendable, Logger: logger,
	})
}
