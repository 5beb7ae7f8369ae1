package main

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Config is cmd/edge's configuration. Flags and SBX_* environment
// variables map onto it here and nowhere else; a flag wins over its
// variable.
type Config struct {
	// SSHAddr is where the SSH broker listens (brokers.<domain>:22 behind
	// a TCP load balancer). SBX_EDGE_SSH_ADDR.
	SSHAddr string
	// HTTPAddr serves /healthz, /readyz and /metrics for the orchestrator
	// and Prometheus. Empty disables it. SBX_EDGE_HTTP_ADDR.
	HTTPAddr string
	// ControlURL is control's internal API (its internal listener, not the
	// public API). SBX_CONTROL_URL.
	ControlURL string
	// InternalSecret is the shared bearer for the internal API; read from
	// SecretFile when set (a mounted Kubernetes Secret), else from
	// SBX_INTERNAL_SECRET.
	InternalSecret string
	SecretFile     string
	// HostKeyDir holds the broker's ssh_host_*_key files, shared by every
	// replica (a mounted Secret) so clients never see a host-key change.
	// SBX_EDGE_HOST_KEY_DIR.
	HostKeyDir string
	// CAKeyFile is the internal user CA's private key (OpenSSH PEM), the
	// same file control signs with, mounted from the same Secret. The edge
	// signs each upstream certificate itself, so a handshake never waits on
	// control for a signature; the price is that the edge holds the CA key,
	// which is why certificates are short-lived and sandboxes trust nothing
	// else. SBX_CA_KEY_FILE.
	CAKeyFile string
	// Drain is how long open SSH sessions may finish on SIGTERM before
	// they are closed with a message. SBX_EDGE_SSH_DRAIN.
	Drain time.Duration
	// ClientAlive and UpstreamAlive are the broker's keepalive intervals
	// towards clients and sandboxes (three unanswered end the connection;
	// 0 disables). SBX_EDGE_CLIENT_ALIVE, SBX_EDGE_UPSTREAM_ALIVE.
	ClientAlive, UpstreamAlive time.Duration
	// LogLevel is debug, info, warn or error. SBX_LOG_LEVEL.
	LogLevel slog.Level
	// ActivityPrefix starts the activity keys in the Redis of --redis-url,
	// which must match control's (--redis-prefix there).
	// SBX_ACTIVITY_PREFIX.
	ActivityPrefix string
	// NoActivity runs the edge without an activity store: nothing it
	// serves is recorded. Only for a control plane without idle offload,
	// which would otherwise see every session through this edge as idle
	// and suspend it under its user; hence an explicit opt-out rather than
	// the default when --redis-url is missing. SBX_EDGE_NO_ACTIVITY=1.
	NoActivity bool

	// Preview configures the preview proxy; empty Preview.Addr disables it.
	Preview PreviewConfig
}

// parseConfig maps args and the environment onto a Config.
func parseConfig(args []string, getenv func(string) string) (Config, error) {
	env := func(k, def string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return def
	}
	var c Config
	fs := flag.NewFlagSet("edge", flag.ContinueOnError)
	fs.StringVar(&c.SSHAddr, "ssh-addr", env("SBX_EDGE_SSH_ADDR", ":2222"), "SSH broker listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", env("SBX_EDGE_HTTP_ADDR", ":9090"), "health and metrics listen address (empty: off)")
	fs.StringVar(&c.ControlURL, "control-url", env("SBX_CONTROL_URL", ""), "control's internal API base URL")
	fs.StringVar(&c.SecretFile, "internal-secret-file", env("SBX_INTERNAL_SECRET_FILE", ""), "file holding the internal API secret (default: $SBX_INTERNAL_SECRET)")
	fs.StringVar(&c.HostKeyDir, "host-key-dir", env("SBX_EDGE_HOST_KEY_DIR", ""), "directory of the broker's shared ssh_host_*_key files")
	fs.StringVar(&c.CAKeyFile, "ca-key-file", env("SBX_CA_KEY_FILE", ""), "the internal user CA's private key, shared with control")
	drain := fs.String("ssh-drain", env("SBX_EDGE_SSH_DRAIN", "30s"), "how long SSH sessions may finish on shutdown")
	clientAlive := fs.String("client-alive-interval", env("SBX_EDGE_CLIENT_ALIVE", "30s"), "keepalive interval towards SSH clients (0: off)")
	upstreamAlive := fs.String("upstream-alive-interval", env("SBX_EDGE_UPSTREAM_ALIVE", "30s"), "keepalive interval towards sandboxes (0: off)")
	level := fs.String("log-level", env("SBX_LOG_LEVEL", "info"), "debug, info, warn or error")
	fs.StringVar(&c.ActivityPrefix, "activity-prefix", env("SBX_ACTIVITY_PREFIX", "sbx:activity:"), "prefix of the activity keys in --redis-url's Redis (as control's --redis-prefix)")
	fs.BoolVar(&c.NoActivity, "no-activity", env("SBX_EDGE_NO_ACTIVITY", "") == "1", "record no activity (only when control runs without idle offload)")
	previewFlags(fs, &c.Preview, env)
	if err := fs.Parse(args); err != nil {
		return Config{}, err
	}
	if err := c.Preview.readSecrets(getenv); err != nil {
		return Config{}, err
	}
	if fs.NArg() > 0 {
		return Config{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	for _, d := range []struct {
		flag string
		in   string
		out  *time.Duration
	}{
		{"--ssh-drain", *drain, &c.Drain},
		{"--client-alive-interval", *clientAlive, &c.ClientAlive},
		{"--upstream-alive-interval", *upstreamAlive, &c.UpstreamAlive},
	} {
		if *d.out, err = time.ParseDuration(d.in); err != nil {
			return Config{}, fmt.Errorf("%s: %w", d.flag, err)
		}
	}
	if err := c.LogLevel.UnmarshalText([]byte(*level)); err != nil {
		return Config{}, fmt.Errorf("--log-level: %w", err)
	}
	if c.SecretFile != "" {
		b, err := os.ReadFile(c.SecretFile)
		if err != nil {
			return Config{}, fmt.Errorf("--internal-secret-file: %w", err)
		}
		c.InternalSecret = strings.TrimSpace(string(b))
	} else {
		c.InternalSecret = getenv("SBX_INTERNAL_SECRET")
	}
	return c, c.Validate()
}

// Validate names every missing or bad field. It has no side effects.
func (c *Config) Validate() error {
	var errs []error
	if c.SSHAddr == "" {
		errs = append(errs, errors.New("--ssh-addr is empty"))
	}
	if c.ControlURL == "" {
		errs = append(errs, errors.New("--control-url (SBX_CONTROL_URL) is required"))
	}
	if c.InternalSecret == "" {
		errs = append(errs, errors.New("the internal API secret is required: --internal-secret-file or SBX_INTERNAL_SECRET"))
	}
	if c.HostKeyDir == "" {
		errs = append(errs, errors.New("--host-key-dir (SBX_EDGE_HOST_KEY_DIR) is required"))
	}
	if c.CAKeyFile == "" {
		errs = append(errs, errors.New("--ca-key-file (SBX_CA_KEY_FILE) is required"))
	}
	if c.Drain < 0 || c.ClientAlive < 0 || c.UpstreamAlive < 0 {
		errs = append(errs, errors.New("--ssh-drain and the keepalive intervals must not be negative"))
	}
	if c.Preview.RedisURL == "" && !c.NoActivity {
		errs = append(errs, errors.New("--redis-url (SBX_REDIS_URL) is required: control's idle detector reads activity from it "+
			"and would suspend sandboxes in use through this edge; pass --no-activity only when control runs without idle offload"))
	}
	errs = append(errs, c.Preview.validate())
	return errors.Join(errs...)
}
