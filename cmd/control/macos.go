package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/platform"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/hosts"
	"github.com/sbxedge/sbx/control/provider/tart/s3bundles"
	"github.com/sbxedge/sbx/internal/objstore"
)

// macOSFlags are the Macs macOS sandboxes run on (a hosts file, each host
// behind its sbx-macd) and the object storage their suspended VMs go to.
type macOSFlags struct {
	hostsFile                    string
	endpoint, bucket, region     string
	accessKeyFile, secretKeyFile string
}

func (m *macOSFlags) register(fs *flag.FlagSet, env func(k, def string) string) {
	fs.StringVar(&m.hostsFile, "macos-hosts", env("SBX_MACOS_HOSTS", ""), "YAML or JSON file of the Macs that run macOS sandboxes as tart VMs, each behind its host agent (sbx-macd), and the macOS profiles' templates (docs/macos-tart.md); macOS profiles then run there, the rest on --provider (empty: no tart hosts)")
	fs.StringVar(&m.endpoint, "s3-endpoint", env("SBX_S3_ENDPOINT", ""), "with --macos-hosts: S3-compatible object storage (http://HOST:PORT, https://HOST:PORT, or HOST:PORT for HTTPS) a suspended macOS sandbox's VM bundle goes to, freeing its Mac's disk (empty: suspended VMs stay on their Mac)")
	fs.StringVar(&m.bucket, "s3-bucket", env("SBX_S3_BUCKET", "sbx-macos-bundles"), "with --s3-endpoint: the bucket, made if missing")
	fs.StringVar(&m.region, "s3-region", env("AWS_REGION", ""), "with --s3-endpoint: the region signed for (most non-AWS servers take any)")
	fs.StringVar(&m.accessKeyFile, "s3-access-key-file", env("SBX_S3_ACCESS_KEY_FILE", ""), "with --s3-endpoint: a file holding the access key id (default: $AWS_ACCESS_KEY_ID)")
	fs.StringVar(&m.secretKeyFile, "s3-secret-key-file", env("SBX_S3_SECRET_KEY_FILE", ""), "with --s3-endpoint: a file holding the secret key (default: $AWS_SECRET_ACCESS_KEY)")
}

// wrap returns def with macOS routed to the hosts file's Macs, or def
// alone when there is none. The file is read now, so a bad one stops the
// start with its field named; the hosts are dialled at Open.
// token is control's internal-API secret, the agents' default token.
func (m *macOSFlags) wrap(def control.ProviderOpener, token string, getenv func(string) string) (control.ProviderOpener, error) {
	if m.hostsFile == "" {
		if m.endpoint != "" {
			return nil, errors.New("--s3-endpoint holds suspended macOS VMs: it needs --macos-hosts")
		}
		return def, nil
	}
	f, err := hosts.Load(m.hostsFile)
	if err != nil {
		return nil, fmt.Errorf("--macos-hosts: %w", err)
	}
	o := &withMacOS{def: def, hosts: f, token: token}
	if m.endpoint == "" {
		return o, nil
	}
	access, err := flagenv.Secret("--s3-access-key-file", m.accessKeyFile, getenv("AWS_ACCESS_KEY_ID"))
	if err != nil {
		return nil, err
	}
	secret, err := flagenv.Secret("--s3-secret-key-file", m.secretKeyFile, getenv("AWS_SECRET_ACCESS_KEY"))
	if err != nil {
		return nil, err
	}
	if access == "" || secret == "" {
		return nil, errors.New("--s3-endpoint: set --s3-access-key-file (or AWS_ACCESS_KEY_ID) and --s3-secret-key-file (or AWS_SECRET_ACCESS_KEY)")
	}
	cfg := objstore.Config{Bucket: m.bucket, Region: m.region, AccessKey: access, SecretKey: secret}
	cfg.SetEndpoint(m.endpoint)
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("--s3-endpoint: %w", err)
	}
	o.s3 = &cfg
	return o, nil
}

// withMacOS runs macOS sandboxes on the hosts file's Macs (the tart
// provider, through their agents) and every other platform on def.
type withMacOS struct {
	def   control.ProviderOpener
	hosts *hosts.File
	token string
	s3    *objstore.Config
}

func (w *withMacOS) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	var bundles tart.BundleStore
	if w.s3 != nil {
		b, err := s3bundles.Open(ctx, *w.s3)
		if err != nil {
			return nil, fmt.Errorf("--s3-endpoint %s: %w", w.s3.Endpoint, err)
		}
		bundles = b
	}
	// The agents take control's internal-API token unless a host names
	// its own: no new credential, no unauthenticated port.
	tp, err := w.hosts.Open(ctx, w.token, bundles, d.Logger)
	if err != nil {
		return nil, fmt.Errorf("--macos-hosts: %w", err)
	}
	def, err := w.def.Open(ctx, d)
	if err != nil {
		return nil, errors.Join(err, tp.Close())
	}
	return &platform.Router{Default: def, ByPlatform: map[string]provider.Provider{tart.PlatformMacOS: tp}}, nil
}
