package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/control/mcpserver"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/objstore"
)

// envOr is variable k, or def when it is unset or empty.
func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// s3Flags are sbx dev's object storage for suspended macOS VMs.
type s3Flags struct{ endpoint, bucket, region, accessKey, secretKeyFile string }

// config is the flags as an objstore configuration. The secret comes from
// a file or the environment, never from a flag's value.
func (f s3Flags) config(getenv func(string) string) (objstore.Config, error) {
	cfg := objstore.Config{Bucket: f.bucket, Region: f.region, AccessKey: f.accessKey}
	cfg.SetEndpoint(f.endpoint)
	secret, err := flagenv.Secret("--s3-secret-key-file", f.secretKeyFile, getenv("AWS_SECRET_ACCESS_KEY"))
	if err != nil {
		return cfg, err
	}
	cfg.SecretKey = secret
	if cfg.AccessKey == "" || cfg.SecretKey == "" {
		return cfg, errors.New("--s3-endpoint: set AWS_ACCESS_KEY_ID (or --s3-access-key) and AWS_SECRET_ACCESS_KEY (or --s3-secret-key-file)")
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("--s3-endpoint: %w", err)
	}
	return cfg, nil
}

func defaultDataDir() string {
	if d := os.Getenv("SBX_DATA_DIR"); d != "" {
		return d
	}
	return homeDataDir()
}

// homeDataDir is the data dir when SBX_DATA_DIR is not set.
func homeDataDir() string {
	home, err := os.UserHomeDir()
	if err != nil {
		return ".sbx"
	}
	return filepath.Join(home, ".sbx", "dev")
}

// tildePath writes p, when under the home folder, as ~/... for a flag's
// default in a help text: help is pasted into issues and docs, and the
// home folder's path names the person and the machine.
func tildePath(p string) string {
	home, err := os.UserHomeDir()
	if err != nil || home == "" || home == "/" {
		return p
	}
	if rel, err := filepath.Rel(home, p); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return filepath.Join("~", rel)
	}
	return p
}

// freePortsExample runs sbx dev with every listener on a free port.
const freePortsExample = `sbx dev --data-dir /tmp/sbx2 --api-addr 127.0.0.1:0 --ssh-addr 127.0.0.1:0 --preview-addr 127.0.0.1:0 --egress-addr 127.0.0.1:0 --metrics-addr ''`

const devUsage = `sbx dev: run the whole stack (API, SSH broker, previews) in one process

Usage:
  sbx dev [flags]

Examples:
  sbx dev
  sbx dev --data-dir /tmp/sbx --idle-timeout 10s
  ` + freePortsExample + `
      (free ports when the defaults are taken; the banner says which, and what to export)

Flags:
`

// runDev maps `sbx dev`'s flags onto a devConfig and runs the stack.
func runDev(ctx context.Context, args []string) error {
	var c devConfig
	fs := flag.NewFlagSet("sbx dev", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), devUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.DataDir, "data-dir", defaultDataDir(), "SQLite database, keys and sandbox workspaces")
	fs.Lookup("data-dir").DefValue = tildePath(defaultDataDir())
	fs.StringVar(&c.SecretsKeyFile, "secrets-key-file", os.Getenv("SBX_SECRETS_KEY_FILE"), "file holding the key account secrets are sealed with, 64 hex digits (empty: one sbx dev keeps in --data-dir)")
	fs.StringVar(&c.APIAddr, "api-addr", "127.0.0.1:8080", "REST API listen address")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "127.0.0.1:9091", "GET /metrics listen address, apart from the API (empty: off)")
	fs.StringVar(&c.SSHAddr, "ssh-addr", "127.0.0.1:2222", "SSH broker listen address")
	fs.StringVar(&c.DatabaseURL, "database-url", "", "Postgres URL (default: $SBX_DATABASE_URL, else embedded SQLite in --data-dir)")
	fs.StringVar(&c.SandboxServer, "sandbox-server", "embedded", `sandbox SSH server: "embedded" (Go) or "sshd" (the machine's OpenSSH)`)
	fs.StringVar(&c.SandboxInit, "sandbox-init", os.Getenv("SBX_SANDBOX_INIT"), "with --sandbox-server sshd: the sbx-init binary sshd runs for the sandbox's services (empty: beside sbx, on PATH, or else sbx itself)")
	fs.StringVar(&c.Tart, "tart", os.Getenv("SBX_TART"), "a tart binary: this machine becomes a one-host macOS pool and the macOS profiles appear (a Mac's tart, or bin/tart from `make faketart` elsewhere)")
	var s3 s3Flags
	fs.StringVar(&s3.endpoint, "s3-endpoint", os.Getenv("SBX_S3_ENDPOINT"), "with --tart: S3-compatible object storage (http://HOST:PORT, https://HOST:PORT, or HOST:PORT for HTTPS) where a suspended macOS sandbox's VM bundle goes, freeing this machine's disk (empty: suspended VMs stay on this machine)")
	fs.StringVar(&s3.bucket, "s3-bucket", envOr("SBX_S3_BUCKET", "sbx-macos-bundles"), "with --s3-endpoint: the bucket, made if missing")
	fs.StringVar(&s3.region, "s3-region", os.Getenv("AWS_REGION"), "with --s3-endpoint: the region signed for (most non-AWS servers take any)")
	fs.StringVar(&s3.accessKey, "s3-access-key", "", "with --s3-endpoint: the access key id (default: $AWS_ACCESS_KEY_ID)")
	fs.StringVar(&s3.secretKeyFile, "s3-secret-key-file", "", "with --s3-endpoint: a file holding the secret key (default: $AWS_SECRET_ACCESS_KEY)")
	fs.DurationVar(&c.ReapInterval, "reap-interval", 30*time.Second, "how often expired sandboxes are reaped")
	fs.DurationVar(&c.ConnLease, "conn-lease", 30*time.Second, "connection log: how long a live connection stays live without its reporter's next batch (a crashed edge's connections end as edge_lost after it)")
	fs.DurationVar(&c.ConnSweep, "conn-sweep", 10*time.Second, "connection log: how often lapsed leases are settled")
	fs.DurationVar(&c.PreviewSessionIdle, "preview-session-idle", time.Minute, "connection log: a preview browser session ends after this long without a request")
	runJobs := fs.Bool("run-jobs", true, "work the background job queue (false: serve the API only, for maintenance and crash tests)")
	fs.DurationVar(&c.SSHDrain, "ssh-drain", 10*time.Second, "on shutdown, how long open SSH sessions may finish before they are closed")
	fs.DurationVar(&c.SSHUpstreamTimeout, "ssh-upstream-timeout", 10*time.Second, "bound on the broker's dial and SSH handshake to a sandbox (raise it on a slow machine)")
	fs.TextVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.PreviewAddr, "preview-addr", "127.0.0.1:8081", "preview proxy listen address (plain HTTP and h2c)")
	fs.StringVar(&c.EgressAddr, "egress-addr", "127.0.0.1:8082", "egress gateway listen address: sandboxes get HTTP_PROXY/HTTPS_PROXY pointing here with their own credential (empty: off)")
	fs.Var((*egresspolicy.PrefixList)(&c.EgressTrust), "egress-trust", "a private range (CIDR or address) the egress gateway may reach, for a local upstream; repeatable (sbx dev's own listeners stay refused)")
	fs.Var((*egresspolicy.PrefixList)(&c.WebhookTrust), "webhook-trust", "an internal range (CIDR or address) webhook deliveries may reach, for a receiver on this machine (127.0.0.1); repeatable")
	fs.StringVar(&c.PreviewDomain, "preview-domain", "preview.localhost", "preview base domain: ports are served at <label>.<domain>, sign-in at <domain>")
	fs.StringVar(&c.OIDCIssuer, "oidc-issuer", os.Getenv("SBX_OIDC_ISSUER"), "OIDC issuer for preview sign-in (empty: a local dev sign-in for the dev account)")
	fs.StringVar(&c.OIDCClientID, "oidc-client-id", os.Getenv("SBX_OIDC_CLIENT_ID"), "OIDC client id")
	fs.StringVar(&c.OIDCClientSecret, "oidc-client-secret", "", "OIDC client secret (default: $SBX_OIDC_CLIENT_SECRET; prefer the variable)")
	fs.StringVar(&c.PreviewMembersFile, "preview-members", os.Getenv("SBX_PREVIEW_MEMBERS"), "JSON file mapping OIDC identities to accounts (see README)")
	fs.DurationVar(&c.IdleTimeout, "idle-timeout", 5*time.Minute, "suspend ready sandboxes with no activity and no open connection for this long")
	fs.StringVar(&c.RedisURL, "redis-url", "", "Redis URL for activity and wake notifications (default: $SBX_REDIS_URL, else in memory, this process only)")
	fs.StringVar(&c.RedisPrefix, "redis-prefix", "sbx:activity:", "prefix of every activity key in Redis, to share one Redis")
	fs.DurationVar(&c.BodyTimeout, "body-timeout", httplimit.DefaultBodyTimeout, "how long a request body (API, internal API, previews) may take to start or stall; before its sender authenticates it must also average 1 KiB/s")
	fs.DurationVar(&c.MCPExecBound, "mcp-exec-bound", mcpserver.DefaultExecBound, "how long an MCP exec_in_sandbox or wait_exec call waits on its command before answering with the command's handle (below MCP clients' 60 s request timeout)")
	fs.DurationVar(&c.ActivityRetry, "activity-retry", 30*time.Second, "how long activity marks are retried while Redis is unreachable before they are dropped (and counted)")
	if !helpRequested(args) {
		// The flag package would print its error and all 20 flags; a
		// mistake gets the CLI's one line instead.
		fs.SetOutput(io.Discard)
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return &usageError{cmd: "sbx dev", msg: err.Error()} // exit 2
	}
	if fs.NArg() > 0 {
		return &usageError{cmd: "sbx dev", msg: fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	// Not flag defaults: -help would print them (a URL's password).
	if err := flagenv.Unshown(fs, os.Getenv, map[string]string{
		"database-url": "SBX_DATABASE_URL", "redis-url": "SBX_REDIS_URL", "oidc-client-secret": "SBX_OIDC_CLIENT_SECRET",
		"s3-access-key": "AWS_ACCESS_KEY_ID",
	}); err != nil {
		return err
	}
	c.NoJobs = !*runJobs
	if c.SandboxInit != "" {
		abs, err := filepath.Abs(c.SandboxInit)
		if err != nil {
			return fmt.Errorf("--sandbox-init: %w", err)
		}
		c.SandboxInit = abs
	}
	if c.Tart != "" && !strings.ContainsRune(c.Tart, '/') {
		p, err := exec.LookPath(c.Tart)
		if err != nil {
			return fmt.Errorf("--tart %s: %w (install tart with `brew install cirruslabs/cli/tart`, or `make faketart` and pass bin/tart)", c.Tart, err)
		}
		c.Tart = p
	}
	if c.Tart != "" {
		abs, err := filepath.Abs(c.Tart)
		if err != nil {
			return fmt.Errorf("--tart: %w", err)
		}
		c.Tart = abs
	}
	if s3.endpoint != "" {
		if c.Tart == "" {
			return &usageError{cmd: "sbx dev", msg: "--s3-endpoint holds macOS sandboxes' bundles: it needs --tart"}
		}
		cfg, err := s3.config(os.Getenv)
		if err != nil {
			return err
		}
		c.TartBundles = &cfg
	}
	c.SandboxInitFallback = selfInit()
	c.DevToken = os.Getenv("SBX_DEV_TOKEN")
	return runDevStack(ctx, c)
}
