package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"strings"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/platform"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/hosts"
)

// macOSFlags are the Macs macOS sandboxes run on (a hosts file, each host
// behind its sbx-macd). Object storage for suspended VMs is each agent's
// own (sbx-macd --s3-endpoint): the bundles move between a Mac and the
// bucket, never through control, which links no S3 client.
type macOSFlags struct {
	hostsFile string
}

func (m *macOSFlags) register(fs *flag.FlagSet, env func(k, def string) string) {
	fs.StringVar(&m.hostsFile, "macos-hosts", env("SBX_MACOS_HOSTS", ""), "YAML or JSON file of the Macs that run macOS sandboxes as tart VMs, each behind its host agent (sbx-macd, which holds the object storage suspended VMs go to), and the macOS profiles' templates (docs/macos-tart.md); macOS profiles then run there, the rest on --provider (empty: no tart hosts)")
}

// wrap returns def with macOS routed to the hosts file's Macs, or def
// alone when there is none. The file is read now, so a bad one stops the
// start with its field named; the hosts are dialled at Open.
// token is control's internal-API secret, the agents' default token.
func (m *macOSFlags) wrap(def control.ProviderOpener, token string) (control.ProviderOpener, error) {
	if m.hostsFile == "" {
		return def, nil
	}
	f, err := hosts.Load(m.hostsFile)
	if err != nil {
		return nil, fmt.Errorf("--macos-hosts: %w", err)
	}
	return &withMacOS{def: def, hosts: f, token: token}, nil
}

// withMacOS runs macOS sandboxes on the hosts file's Macs (the tart
// provider, through their agents) and every other platform on def.
type withMacOS struct {
	def   control.ProviderOpener
	hosts *hosts.File
	token string
}

func (w *withMacOS) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	// The agents take control's internal-API token unless a host names
	// its own: no new credential, no unauthenticated port.
	tp, err := w.hosts.Open(ctx, w.token, d.Logger)
	if err != nil {
		return nil, fmt.Errorf("--macos-hosts: %w", err)
	}
	def, err := w.def.Open(ctx, d)
	if err != nil {
		return nil, errors.Join(err, tp.Close())
	}
	return &platform.Router{Default: def, ByPlatform: map[string]provider.Provider{tart.PlatformMacOS: tp}}, nil
}

// movedFlag adds, to flag's "not defined" error for an object-storage
// flag, where that flag lives now: the bundles move between each Mac and
// the bucket, so the S3 settings are the host agent's, not control's.
func movedFlag(err error) error {
	if strings.Contains(err.Error(), "flag provided but not defined: -s3-") {
		return fmt.Errorf("%w (object storage for suspended macOS sandboxes is set on each Mac's host agent: sbx-macd --s3-endpoint, see docs/macos-tart.md)", err)
	}
	return err
}
