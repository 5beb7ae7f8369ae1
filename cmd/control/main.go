// Command control is the control plane: the public REST API and, on a
// separate listener, the internal API the edge calls. Several replicas
// share one Postgres; background jobs run once across them.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/k8s"
	"github.com/sbxedge/sbx/control/provider/simfleet"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/flagenv"
	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// sandboxInitArgs make control stand in for sbx-init: with the local
// provider's sshd and no sbx-init installed, a sandbox's sshd runs
// "control sandbox-init ctl --socket S" to reach the sandbox's init.
var sandboxInitArgs = []string{"sandbox-init", "ctl"}

func main() {
	if len(os.Args) > 2 && slices.Equal(os.Args[1:3], sandboxInitArgs) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := sandboxinit.Ctl(ctx, "control sandbox-init ctl", os.Args[3:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	flagenv.Main("control", parseConfig, func(ctx context.Context, cfg control.Config, log *slog.Logger) error {
		cfg.Logger = log
		if exe, err := os.Executable(); err == nil {
			cfg.SandboxInitFallback = []string{exe, sandboxInitArgs[0]}
		}
		return run(ctx, cfg, nil)
	})
}

// parseConfig maps flags and SBX_* variables onto control.Config; a flag
// wins over its variable.
func parseConfig(args []string, getenv func(string) string) (control.Config, slog.Level, error) {
	env := flagenv.Env(getenv)
	var c control.Config
	fs := flag.NewFlagSet("control", flag.ContinueOnError)
	fs.StringVar(&c.DataDir, "data-dir", env("SBX_DATA_DIR", "/var/lib/sbx"), "keys (CA, host-key secret) and local-provider workspaces")
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", env("SBX_SECRETS_KEY_FILE", ""), "file holding the 32-byte key (64 hex digits) account secrets are sealed with; the same on every replica (empty: secrets are off)")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL (default: $SBX_DATABASE_URL; empty: SQLite in --data-dir, single replica only)")
	fs.StringVar(&c.APIAddr, "api-addr", env("SBX_API_ADDR", ":8080"), "public REST API listen address")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", env("SBX_METRICS_ADDR", "127.0.0.1:9091"), "GET /metrics listen address, apart from the API: metrics name accounts, keep it private (empty: off)")
	fs.StringVar(&c.InternalAddr, "internal-addr", env("SBX_INTERNAL_ADDR", ":8081"), "internal API (/internal/v1, for the edge) listen address; keep it private")
	secretFile := fs.String("internal-secret-file", env("SBX_INTERNAL_SECRET_FILE", ""), "file holding the internal API secret (default: $SBX_INTERNAL_SECRET)")
	sshPublic := fs.String("ssh-public-addr", env("SBX_SSH_PUBLIC_ADDR", "127.0.0.1:2222"), "the edge's SSH address clients are told (host:port)")
	fs.StringVar(&c.ProviderMode, "sandbox-server", env("SBX_SANDBOX_SERVER", "embedded"), `local provider's sandbox SSH server: "embedded" or "sshd"`)
	fs.StringVar(&c.SandboxInit, "sandbox-init", env("SBX_SANDBOX_INIT", ""), "with --sandbox-server sshd: the sbx-init binary sshd runs for the sandbox's services (empty: beside this program, on PATH, or else this program itself)")
	fs.StringVar(&c.JobsInstance, "jobs-instance", env("SBX_JOBS_INSTANCE", ""), "this replica's name on the job queue, kept across its restarts and never shared by two live replicas (a pod's name): at start, jobs a crashed run of it left running are retried at once (empty: a fresh name each start; they wait for the stuck-job rescue)")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL for shared activity (default: $SBX_REDIS_URL; empty: in-memory, one replica only)")
	fs.StringVar(&c.RedisPrefix, "activity-prefix", env("SBX_ACTIVITY_PREFIX", "sbx:activity:"), "prefix of the activity keys in --redis-url's Redis (the edge's --activity-prefix must match)")
	fs.StringVar(&c.Lifecycle.EgressProxy, "egress-proxy", env("SBX_EGRESS_PROXY", ""), "the edge egress gateway's host:port as sandboxes reach it; every sandbox gets HTTP(S)_PROXY with its own credential and its credential routes there (empty: no proxy environment)")
	fs.BoolVar(&c.Lifecycle.NoIdleOffload, "no-idle-offload", env("SBX_NO_IDLE_OFFLOAD", "") == "1", "never suspend idle sandboxes (required without --redis-url: a separate edge's activity is invisible then)")
	reconcile := fs.String("reconcile-interval", env("SBX_RECONCILE_INTERVAL", "1m"), "how often records are compared with the provider's pods: a vanished pod, or a pod no sandbox owns, is handled within it")
	prov := fs.String("provider", env("SBX_PROVIDER", "local"), `where sandboxes run: "local" (this machine) or "k8s" (pods)`)
	k8sNS := fs.String("k8s-namespace", env("SBX_K8S_NAMESPACE", "sbx-sandboxes"), "namespace of sandbox pods (k8s provider)")
	k8sCatalog := fs.String("k8s-catalog", env("SBX_K8S_CATALOG", "/etc/sbx/catalog.yaml"), "pools and profiles file (k8s provider)")
	kubeconfig := fs.String("kubeconfig", env("SBX_KUBECONFIG", ""), "kubeconfig file (k8s provider; empty: in-cluster service account)")
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
		return c, 0, err
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
	switch *prov {
	case "local":
	case "k8s":
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
	case simfleetProvider:
		// Not in the help and not for users: sandboxes that are only SSH
		// echo endpoints, for go run ./loadtest scale.
		c.Provider = simfleetOpener{}
	default:
		return c, 0, fmt.Errorf("--provider %q: want local or k8s", *prov)
	}
	if c.InternalSecret, err = flagenv.Secret("--internal-secret-file", *secretFile, getenv("SBX_INTERNAL_SECRET")); err != nil {
		return c, 0, err
	}
	// Without Redis, activity lives in this process's memory, where the
	// edge (another process) cannot record it: the idle detector would
	// suspend sandboxes in use. Refuse rather than guess.
	if err := c.Validate(); err != nil {
		return c, 0, err
	}
	if c.RedisURL == "" && !c.Lifecycle.NoIdleOffload {
		return c, 0, errors.New("--redis-url is required for idle offload (the edge records activity there); give it, or --no-idle-offload to keep sandboxes ready until their deadline")
	}
	return c, lv, nil
}

// kubernetes runs sandboxes as pods: the k8s provider, injected into
// control so only this binary links client-go.
type kubernetes k8s.Setup

func (k *kubernetes) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	return k8s.Open(ctx, k8s.Setup(*k), d.Store, d.Registry, d.Logger)
}

// simfleetProvider selects package simfleet's simulated sandboxes; it
// is for load tests only, so the --provider help leaves it out.
const simfleetProvider = "internal-simfleet"

type simfleetOpener struct{}

// Open places the fleet at $SBX_SIMFLEET_BASE (a loopback address) when
// set, so two load tests on one machine keep apart.
func (simfleetOpener) Open(ctx context.Context, d control.ProviderDeps) (provider.Provider, error) {
	cfg := simfleet.Config{Logger: d.Logger}
	if v := os.Getenv("SBX_SIMFLEET_BASE"); v != "" {
		a, err := netip.ParseAddr(v)
		if err != nil {
			return nil, fmt.Errorf("SBX_SIMFLEET_BASE: %w", err)
		}
		cfg.Base = a
	}
	return simfleet.New(cfg)
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
