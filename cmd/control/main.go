// Command control is the control plane: the public REST API and, on a
// separate listener, the internal API the edge calls. Several replicas
// share one Postgres and one Redis, and run sandboxes as Kubernetes
// pods; background jobs run once across them. It links only those
// backends: one machine (SQLite, local sandboxes, activity in memory)
// is `sbx dev`. With --macos-hosts, macOS sandboxes run on Macs (tart
// VMs behind each Mac's sbx-macd) beside the pods.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/httplimit"
)

func main() {
	flagenv.Main("control", parseConfig, func(ctx context.Context, cfg control.Config, log *slog.Logger) error {
		cfg.Logger = log
		return run(ctx, cfg, nil)
	})
}

// parseConfig maps flags and SBX_* variables onto control.Config; a flag
// wins over its variable.
func parseConfig(args []string, getenv func(string) string) (control.Config, slog.Level, error) {
	env := flagenv.Env(getenv)
	var c control.Config
	fs := flag.NewFlagSet("control", flag.ContinueOnError)
	fs.StringVar(&c.DataDir, "data-dir", env("SBX_DATA_DIR", "/var/lib/sbx"), "keys (CA, host-key secret)")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", env("SBX_SECRETS_KEY_FILE", ""), "file holding the 32-byte key (64 hex digits) account secrets are sealed with; the same on every replica (empty: secrets are off)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL, required (default: $SBX_DATABASE_URL)")
	fs.StringVar(&c.APIAddr, "api-addr", env("SBX_API_ADDR", ":8080"), "public REST API listen address")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SBX_METRICS_ADDR", "127.0.0.1:9091"), "GET /metrics listen address, apart from the API: metrics name accounts, keep it private (empty: off)")
	fs.StringVar(&c.InternalAddr, "internal-addr", env("SBX_INTERNAL_ADDR", ":8081"), "internal API (/internal/v1, for the edge) listen address; keep it private")
	secretFile := fs.String("internal-secret-file", env("SBX_INTERNAL_SECRET_FILE", ""), "file holding the internal API secret (default: $SBX_INTERNAL_SECRET)")
	sshPublic := fs.String("ssh-public-addr", env("SBX_SSH_PUBLIC_ADDR", "127.0.0.1:2222"), "the edge's SSH address clients are told (host:port)")
	fs.StringVar(&c.JobsInstance, "jobs-instance", env("SBX_JOBS_INSTANCE", ""), "this replica's name on the job queue, kept across its restarts and never shared by two live replicas (a pod's name): at start, jobs a crashed run of it left running are retried at once (empty: a fresh name each start; they wait for the stuck-job rescue)")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL for shared activity and invalidations, required (default: $SBX_REDIS_URL)")
	fs.StringVar(&c.RedisPrefix, "activity-prefix", env("SBX_ACTIVITY_PREFIX", "sbx:activity:"), "prefix of the activity keys in --redis-url's Redis (the edge's --activity-prefix must match)")
	fs.StringVar(&c.Lifecycle.EgressProxy, "egress-proxy", env("SBX_EGRESS_PROXY", ""), "the edge egress gateway's host:port as sandboxes reach it; every sandbox gets HTTP(S)_PROXY with its own credential and its credential routes there (empty: no proxy environment)")
	fs.BoolVar(&c.Lifecycle.NoIdleOffload, "no-idle-offload", env("SBX_NO_IDLE_OFFLOAD", "") == "1", "never suspend idle sandboxes")
	reconcile := fs.String("reconcile-interval", env("SBX_RECONCILE_INTERVAL", "1m"), "how often records are compared with the provider's pods: a vanished pod, or a pod no sandbox owns, is handled within it")
	prov := fs.String("provider", env("SBX_PROVIDER", "k8s"), `where sandboxes run: "k8s" (pods; the one this binary links)`)
	k8sNS := fs.String("k8s-namespace", env("SBX_K8S_NAMESPACE", "sbx-sandboxes"), "namespace of sandbox pods (k8s provider)")
	k8sCatalog := fs.String("k8s-catalog", env("SBX_K8S_CATALOG", "/etc/sbx/catalog.yaml"), "pools and profiles file (k8s provider)")
	kubeconfig := fs.String("kubeconfig", env("SBX_KUBECONFIG", ""), "kubeconfig file (k8s provider; empty: in-cluster service account)")
	var macOS macOSFlags
	macOS.register(fs, env)
	level := fs.String("log-level", env("SBX_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&c.PreviewDomain, "preview-domain", env("SBX_PREVIEW_DOMAIN", ""), "preview base domain, its own registrable domain (empty: POST /ports is 503)")
	streamOrigins := fs.String("stream-origins", env("SBX_STREAM_ORIGINS", ""), "comma-separated host[:port] patterns of the browser origins that may open terminal streams: the API's public names and the pages that embed terminals (the address a connection comes in on is always allowed; the request's Host never is)")
	fs.StringVar(&c.PreviewMembersFile, "preview-members", env("SBX_PREVIEW_MEMBERS", ""), "JSON file mapping OIDC identities to accounts, for private previews")
	apiConns := fs.String("api-max-conns", env("SBX_API_MAX_CONNS", strconv.Itoa(control.DefaultAPIMaxConns)), "most REST API connections held at once; beyond it new ones wait in the kernel's backlog, so no flood takes every file descriptor")
	internalConns := fs.String("internal-max-conns", env("SBX_INTERNAL_MAX_CONNS", strconv.Itoa(control.DefaultInternalMaxConns)), "most internal API connections held at once")
	bodyTimeout := fs.String("body-timeout", env("SBX_BODY_TIMEOUT", httplimit.DefaultBodyTimeout.String()), "how long a request body may take to start or stall (both APIs); before its sender authenticates it must also average 1 KiB/s, so a body that never arrives is cut after this")
	webhookTrust := (*egresspolicy.PrefixList)(&c.Webhook.Trust)
	if v := env("SBX_WEBHOOK_TRUST", ""); v != "" {
		if err := webhookTrust.Set(v); err != nil {
			return c, 0, fmt.Errorf("SBX_WEBHOOK_TRUST: %w", err)
		}
	}
	fs.Var(webhookTrust, "webhook-trust", "an internal range (CIDR or address) webhook deliveries may reach, for a receiver on the operator's own network; repeatable (default: $SBX_WEBHOOK_TRUST)")
	if err := fs.Parse(args); err != nil {
		return c, 0, movedFlag(err)
	}
	for _, n := range []struct {
		flag, v string
		to      *int
	}{{"--api-max-conns", *apiConns, &c.APIMaxConns}, {"--internal-max-conns", *internalConns, &c.InternalMaxConns}} {
		var err error
		if *n.to, err = strconv.Atoi(n.v); err != nil || *n.to <= 0 {
			return c, 0, fmt.Errorf("%s %q: want a positive count", n.flag, n.v)
		}
	}
	d, err := time.ParseDuration(*bodyTimeout)
	if err != nil || d <= 0 {
		return c, 0, fmt.Errorf("--body-timeout %q: want a positive duration such as 20s", *bodyTimeout)
	}
	c.BodyTimeout = d
	// Not flag defaults: -help would print them (a URL's password).
	if err := flagenv.Unshown(fs, getenv, map[string]string{"database-url": "SBX_DATABASE_URL", "redis-url": "SBX_REDIS_URL"}); err != nil {
		return c, 0, err
	}
	c.PreviewScheme = "https"
	for o := range strings.SplitSeq(*streamOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			c.StreamOrigins = append(c.StreamOrigins, o)
		}
	}
	every, err := time.ParseDuration(*reconcile)
	if err != nil || every <= 0 {
		return c, 0, fmt.Errorf("--reconcile-interval %q: want a positive duration such as 1m", *reconcile)
	}
	c.Lifecycle.ReconcileInterval = every
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		return c, 0, fmt.Errorf("--log-level: %w", err)
	}
	host, portStr, err := net.SplitHostPort(*sshPublic)
	if err != nil {
		return c, 0, fmt.Errorf("--ssh-public-addr: %w", err)
	}
	if c.SSHPort, err = strconv.Atoi(portStr); err != nil {
		return c, 0, fmt.Errorf("--ssh-public-addr port: %w", err)
	}
	c.SSHHost = host
	switch p, extra := providers[*prov]; {
	case extra:
		c.Provider = p
	case *prov == "k8s":
		cat, err := k8s.LoadCatalog(*k8sCatalog)
		if err != nil {
			return c, 0, fmt.Errorf("--k8s-catalog: %w", err)
		}
		c.Lifecycle.DefaultProfile = cat.DefaultProfile
		kc := &kubernetes{Config: k8s.Config{Namespace: *k8sNS, Catalog: cat}, Kubeconfig: *kubeconfig}
		if err := kc.Config.Validate(); err != nil {
			return c, 0, fmt.Errorf("--provider k8s: %w", err)
		}
		c.Provider = kc
	case *prov == "local":
		return c, 0, errors.New("--provider local: this build runs replicas, whose sandboxes are pods (k8s); sandboxes on one machine are `sbx dev`, or a control built with -tags sbxlocal (a fleet on one machine: go run ./loadtest fleet)")
	default:
		return c, 0, fmt.Errorf("--provider %q: want k8s", *prov)
	}
	if c.InternalSecret, err = flagenv.Secret("--internal-secret-file", *secretFile, getenv("SBX_INTERNAL_SECRET")); err != nil {
		return c, 0, err
	}
	if c.Provider, err = macOS.wrap(c.Provider, c.InternalSecret); err != nil {
		return c, 0, err
	}
	// A replica shares its store and activity with the others, and the
	// edge records activity in Redis: neither has a one-process stand-in
	// here.
	if c.DatabaseURL == "" {
		return c, 0, errors.New("--database-url (SBX_DATABASE_URL) is required: replicas share one Postgres")
	}
	if c.RedisURL == "" {
		return c, 0, errors.New("--redis-url (SBX_REDIS_URL) is required: the edge records activity there and invalidations travel through it")
	}
	if err := c.Validate(); err != nil {
		return c, 0, err
	}
	return c, lv, nil
}

// providers are the --provider choices a build adds beyond k8s:
// local.go, built with -tags sbxlocal, adds "local" for a fleet of
// replicas on one machine and "internal-simfleet" for load tests. The default build (the replica's image) links
// no local provider.
var providers = map[string]control.ProviderOpener{}

// kubernetes runs sandboxes as pods: the k8s provider, injected into
// control so only this binary links client-go.
type kubernetes k8s.Setup

func (k *kubernetes) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	return k8s.Open(ctx, k8s.Setup(*k), d.Store, d.Registry, d.Logger)
}

// run serves until ctx ends. ready, if set, sees the running service.
func run(ctx context.Context, cfg control.Config, ready func(*control.Service)) error {
	svc, err := control.Open(ctx, cfg)
	if err != nil {
		return err
	}
	if err := svc.Start(ctx); err != nil {
		return errors.Join(err, svc.Shutdown(context.Background()))
	}
	if ready != nil {
		ready(svc)
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return svc.Shutdown(sctx)
}
