package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider/tart/s3bundles"
	"github.com/sbxedge/sbx/control/standalone"
	"github.com/sbxedge/sbx/control/webhook"
	"github.com/sbxedge/sbx/edge"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/objstore"
)

// devConfig is `sbx dev`'s configuration, filled from its flags.
type devConfig struct {
	DataDir string // SQLite database, keys and sandbox workspaces
	// SecretsKeyFile seals account secrets; empty: a key sbx dev keeps
	// in DataDir (keys/secrets_key), made on first start.
	SecretsKeyFile string
	APIAddr        string // REST API
	// MCPExecBound: how long /mcp's exec calls wait before answering with
	// a running command's handle.
	MCPExecBound time.Duration
	MetricsAddr  string // GET /metrics of the whole stack; empty: off
	SSHAddr      string // SSH broker
	PreviewAddr  string // preview proxy (plain HTTP and h2c)
	// EgressAddr is the egress gateway sandboxes' proxy-aware tools go
	// through (HTTP_PROXY); empty: off, and no proxy environment.
	EgressAddr string
	// EgressTrust are private ranges the gateway may reach (a local
	// package mirror); the stack's own listeners stay refused.
	EgressTrust []netip.Prefix
	// WebhookTrust are internal ranges webhook deliveries may reach (a
	// receiver on this machine).
	WebhookTrust []netip.Prefix
	DatabaseURL  string // Postgres; empty: SQLite in DataDir
	// SandboxServer is the local provider's SSH server: embedded or sshd.
	SandboxServer string
	// SandboxInit is the sbx-init binary sshd runs for the sandbox's
	// services; empty: one beside sbx or on PATH, else
	// SandboxInitFallback (sbx itself, when run as the CLI).
	SandboxInit         string
	SandboxInitFallback []string
	// Tart is a tart binary (absolute): macOS sandboxes run as its VMs
	// on this machine, and the macOS profiles are seeded. Empty: Linux
	// only.
	Tart string
	// TartBundles, with Tart, is the bucket suspended macOS VMs' bundles
	// go to; nil keeps them on this machine's disk.
	TartBundles  *objstore.Config
	ReapInterval time.Duration
	// ConnLease, ConnSweep and PreviewSessionIdle tune the connection
	// log (control.Config, edge.Config).
	ConnLease, ConnSweep, PreviewSessionIdle time.Duration
	// NoJobs serves the API without working the job queue.
	NoJobs   bool
	SSHDrain time.Duration
	// SSHUpstreamTimeout bounds the broker's dial and handshake to a
	// sandbox; 0 keeps the edge's default.
	SSHUpstreamTimeout time.Duration
	LogLevel           slog.Level
	IdleTimeout        time.Duration
	PreviewDomain      string
	// OIDC sign-in for previews; an empty issuer offers the dev sign-in
	// for the dev account instead.
	OIDCIssuer, OIDCClientID, OIDCClientSecret string
	PreviewMembersFile                         string
	// RedisURL holds activity and wake notifications; empty: in memory.
	RedisURL, RedisPrefix string
	ActivityRetry         time.Duration
	// BodyTimeout bounds request bodies on the API, the internal API and
	// the preview proxy (httplimit.BodyDeadline); 0: its default.
	BodyTimeout time.Duration
	// DevToken is the dev account's token to seed (SBX_DEV_TOKEN); empty:
	// a fresh one, or the one in the token file.
	DevToken string
}

// devStack is a running `sbx dev`: control and the production edge in
// one process. The edge talks to control over the internal API on
// loopback, exactly as cmd/edge talks to cmd/control; only the activity
// store and preview invalidations are handed over in process.
type devStack struct {
	svc       *control.Service
	edge      *edge.Edge
	token     string
	fresh     bool // the token was made now
	tokenFile string
	drain     time.Duration
	unlock    func() error // releases the data dir
}

// startDevStack starts control and then the edge. tweak, if set, adjusts
// control's configuration first (tests give it a provider of their own).
func startDevStack(ctx context.Context, c devConfig, log *slog.Logger, tweak func(*control.Config)) (*devStack, error) {
	if err := os.MkdirAll(c.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir: %w", err)
	}
	unlock, err := lockDataDir(c.DataDir)
	if err != nil {
		return nil, err
	}
	d, err := startDevStackLocked(ctx, c, log, tweak)
	if err != nil {
		return nil, errors.Join(err, unlock())
	}
	d.unlock = unlock
	return d, nil
}

func startDevStackLocked(ctx context.Context, c devConfig, log *slog.Logger, tweak func(*control.Config)) (*devStack, error) {
	instance, err := devJobsInstance(c.DataDir)
	if err != nil {
		return nil, err
	}
	// Listen before anything else: the API reports the broker's and the
	// proxy's real ports (the flags may say :0).
	sshLn, err := net.Listen("tcp", c.SSHAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for SSH on %s: %w", c.SSHAddr, err)
	}
	previewLn, err := net.Listen("tcp", c.PreviewAddr)
	if err != nil {
		sshLn.Close()
		return nil, fmt.Errorf("listen for previews on %s: %w", c.PreviewAddr, err)
	}
	var egressLn net.Listener // nil: the gateway is off
	if c.EgressAddr != "" {
		if egressLn, err = net.Listen("tcp", c.EgressAddr); err != nil {
			sshLn.Close()
			previewLn.Close()
			return nil, fmt.Errorf("listen for the egress gateway on %s: %w", c.EgressAddr, err)
		}
	}
	closeListeners := func() {
		sshLn.Close()
		previewLn.Close()
		if egressLn != nil {
			egressLn.Close()
		}
	}
	secretsKey := c.SecretsKeyFile
	if secretsKey == "" {
		if secretsKey, err = devSecretsKey(c.DataDir); err != nil {
			closeListeners()
			return nil, err
		}
	}
	sshHost, sshPort := publicAddr(sshLn.Addr())
	_, previewPort := publicAddr(previewLn.Addr())
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	var running atomic.Pointer[edge.Edge] // set once the edge serves
	cfg := control.Config{
		DataDir: c.DataDir, DatabaseURL: c.DatabaseURL, APIAddr: c.APIAddr, MetricsAddr: c.MetricsAddr,
		SecretsKeyFile: secretsKey, InternalAddr: "127.0.0.1:0", InternalSecret: hex.EncodeToString(secret), PreviewMembersFile: c.PreviewMembersFile,
		// Local sandboxes share this process's loopback: a preview of one
		// of its own ports would publish sbx dev itself (its metrics name
		// accounts). Control adds its API, metrics and internal API once
		// bound; the edge runs no other listener here (no health or
		// metrics address, no ACME listener in plain HTTP).
		ReserveOwnPorts: "sbx dev",
		ReservedPorts: map[int]string{
			sshLn.Addr().(*net.TCPAddr).Port:     "sbx dev's own SSH broker",
			previewLn.Addr().(*net.TCPAddr).Port: "sbx dev's own preview proxy",
		},
		SSHHost: sshHost, SSHPort: sshPort, NoJobs: c.NoJobs, JobsInstance: instance,
		Webhook: webhook.Config{Trust: c.WebhookTrust},
		// This machine: local sandboxes, SQLite (without --database-url),
		// activity in memory (without --redis-url); see standalone.Fill.
		Provider:      standalone.Local{Mode: c.SandboxServer, InitPath: c.SandboxInit, InitFallback: c.SandboxInitFallback},
		PreviewDomain: c.PreviewDomain, PreviewScheme: "http", PreviewPort: previewPort,
		// One process: invalidations reach the edge directly.
		PreviewChanged: func(ctx context.Context, inv edgeapi.Invalidation) error {
			if e := running.Load(); e != nil {
				e.Invalidate(context.WithoutCancel(ctx), inv)
			}
			return nil
		},
		// readyz answers 200 once the edge serves too.
		AlsoReady: func() bool { e := running.Load(); return e != nil && e.Ready() },
		ConnLease: c.ConnLease, ConnMaxLease: c.ConnLease, ConnSweepEvery: c.ConnSweep,
		Lifecycle: lifecycle.Config{ReapInterval: c.ReapInterval, IdleTimeout: c.IdleTimeout, DefaultProfile: devseed.DefaultProfile},
		RedisURL:  c.RedisURL, RedisPrefix: c.RedisPrefix, ActivityRetry: c.ActivityRetry,
		BodyTimeout: c.BodyTimeout, Logger: log, MCPExecBound: c.MCPExecBound,
	}
	if egressLn != nil {
		h, p := publicAddr(egressLn.Addr())
		cfg.Lifecycle.EgressProxy = net.JoinHostPort(h, strconv.Itoa(p))
		cfg.ReservedPorts[p] = "sbx dev's own egress gateway"
	}
	if c.Tart != "" {
		local := cfg.Provider.(standalone.Local)
		local.Tart = &standalone.TartConfig{Path: c.Tart, Templates: devseed.MacOSTemplates, Suspendable: true}
		if c.TartBundles != nil {
			b, err := s3bundles.Open(ctx, *c.TartBundles)
			if err != nil {
				closeListeners()
				return nil, fmt.Errorf("--s3-endpoint %s: %w", c.TartBundles.Endpoint, err)
			}
			local.Tart.Bundles = b
		}
		cfg.Provider = local
	}
	if tweak != nil {
		tweak(&cfg)
	}
	cfg = standalone.Fill(cfg)
	svc, err := control.Open(ctx, cfg)
	if err != nil {
		closeListeners()
		return nil, err
	}
	d := &devStack{svc: svc, tokenFile: devTokenFile(c.DataDir), drain: c.SSHDrain}
	d.token, d.fresh, err = devseed.Seed(ctx, svc.Store, c.DevToken, d.tokenFile)
	if err == nil && c.Tart != "" {
		err = devseed.SeedProfiles(ctx, svc.Store, devseed.MacOSProfiles)
	}
	if err == nil {
		d.edge, err = startDevEdge(ctx, c, svc, cfg.InternalSecret, sshLn, previewLn, egressLn, log)
	}
	if err != nil {
		closeListeners()
		return nil, errors.Join(err, svc.Shutdown(context.Background()))
	}
	running.Store(d.edge)
	return d, nil
}

// shutdown stops the edge first (its sessions need the sandbox servers
// that control's shutdown stops), then control.
func (d *devStack) shutdown() error {
	ectx, cancel := context.WithTimeout(context.Background(), d.drain+5*time.Second)
	defer cancel()
	err := d.edge.Shutdown(ectx)
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = errors.Join(err, d.svc.Shutdown(sctx))
	if d.unlock != nil {
		err = errors.Join(err, d.unlock())
	}
	return err
}

// devTryText is the banner's "Try:" for a stack serving apiURL from
// dataDir. The token itself is never printed (scrollback and CI logs keep
// what a banner shows), nor put in SBX_TOKEN: the CLI reads the token file
// and sends it only to this stack's API, where SBX_TOKEN would go to any
// API named later. Only what differs from the CLI's defaults is exported.
// self is how to run this sbx (cliName).
func devTryText(apiURL, dataDir, self string) string {
	var env []string
	if key, _ := apiKey(apiURL); key != defaultAPI {
		env = append(env, "SBX_API="+apiURL)
	}
	// Against the home default, not SBX_DATA_DIR: the other terminal
	// may not have this one's environment.
	if dataDir != homeDataDir() {
		env = append(env, "SBX_DATA_DIR="+shellQuote(dataDir))
	}
	var b strings.Builder
	b.WriteString("\nTry:\n")
	if len(env) > 0 {
		b.WriteString("  export " + strings.Join(env, " ") + "\n")
	}
	fmt.Fprintf(&b, "  %[1]s create && %[1]s list\n  %[1]s ssh <id>\n\n", self)
	return b.String()
}

// cliName is how the banner names this sbx: "sbx" when that is what
// PATH finds, else the running binary's path (sbx dev started with go
// run, or from a folder not on PATH), so the hints work as printed.
func cliName(lookPath func(string) (string, error)) string {
	exe, err := os.Executable()
	if err != nil {
		return "sbx"
	}
	if p, err := lookPath("sbx"); err == nil && sameFile(p, exe) {
		return "sbx"
	}
	return shellQuote(exe)
}

func sameFile(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// portTaken adds to a listen failure on a taken port how to run a second
// stack beside the first.
func portTaken(err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	return fmt.Errorf("%w\n\nAnother sbx dev (or another program) has that port. To run this one beside it, on free ports:\n  %s", err, freePortsExample)
}

// runDevStack runs the stack until ctx ends.
func runDevStack(ctx context.Context, c devConfig) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: c.LogLevel}))
	d, err := startDevStack(ctx, c, log, nil)
	if err != nil {
		return portTaken(err)
	}
	sshHost, sshPort := publicAddr(d.edge.SSHAddr())
	_, previewPort := publicAddr(d.edge.PreviewAddr())
	fmt.Fprintf(os.Stderr, "\nsbx dev is up\n  API:        %s\n  SSH broker: %s\n  previews:   http://<label>.%s:%d\n  data dir:   %s\n  token file: %s\n",
		d.svc.URL(), net.JoinHostPort(sshHost, strconv.Itoa(sshPort)), c.PreviewDomain, previewPort, c.DataDir, d.tokenFile)
	if m := d.svc.MetricsAddr(); m != nil {
		fmt.Fprintf(os.Stderr, "  metrics:    http://%s/metrics\n", m)
	}
	fmt.Fprint(os.Stderr, devTryText(d.svc.URL(), c.DataDir, cliName(exec.LookPath)))
	select {
	case <-ctx.Done():
	case err = <-d.edge.Failed():
	}
	fmt.Fprintln(os.Stderr, "shutting down; sandboxes keep their workspaces")
	return errors.Join(err, d.shutdown())
}

// startDevEdge starts control (its API and internal API) and then the
// edge in front of it on the given listeners.
func startDevEdge(ctx context.Context, c devConfig, svc *control.Service, secret string, sshLn, previewLn, egressLn net.Listener, log *slog.Logger) (*edge.Edge, error) {
	key, err := loadOrCreateKey(filepath.Join(c.DataDir, "keys", "preview_session"))
	if err != nil {
		return nil, err
	}
	if err := svc.Start(ctx); err != nil {
		return nil, err
	}
	// Beside the token file, now that the API listens: the CLI sends the
	// token to this API only.
	if err := writeDevAPI(c.DataDir, svc.URL()); err != nil {
		return nil, err
	}
	cfg := edge.DefaultConfig()
	cfg.SSHListener = sshLn
	cfg.ControlURL, cfg.InternalSecret = svc.InternalURL(), secret
	// Host keys stay in the data dir, so clients see the same key across
	// restarts.
	cfg.HostKeyDir = filepath.Join(c.DataDir, "keys", "broker")
	cfg.CA = svc.CA
	cfg.Drain = c.SSHDrain
	cfg.ConnLease = c.ConnLease
	if c.SSHUpstreamTimeout > 0 {
		cfg.UpstreamTimeout = c.SSHUpstreamTimeout
	}
	// Control's activity store, in memory unless Redis is given: the edge
	// marks SSH and preview traffic where the idle detector reads it.
	cfg.Activity = svc.Activity
	cfg.Preview = edge.PreviewConfig{
		Listener: previewLn, PlainHTTP: true, Domain: c.PreviewDomain, PublicPort: previewLn.Addr().(*net.TCPAddr).Port,
		SessionKey: key, RouteTTL: cfg.Preview.RouteTTL, BodyTimeout: c.BodyTimeout, SessionIdle: c.PreviewSessionIdle,
	}
	if c.OIDCIssuer != "" {
		cfg.Preview.OIDC = &preview.OIDCConfig{Issuer: c.OIDCIssuer, ClientID: c.OIDCClientID, ClientSecret: c.OIDCClientSecret}
	} else {
		cfg.Preview.DevSignIn = &preview.DevSignIn{AccountID: devseed.AccountID, User: "dev"}
	}
	if egressLn != nil {
		// Local sandboxes share this machine's loopback with the stack:
		// its API, metrics and database stay refused even when the
		// operator trusts loopback for a local upstream, and so does an
		// IP-literal Redis. The edge adds its own listeners and the
		// internal API.
		var own []netip.AddrPort
		for _, a := range []string{urlHost(svc.URL()), addrString(svc.MetricsAddr()), urlHost(c.DatabaseURL), urlHost(c.RedisURL)} {
			if ap, err := netip.ParseAddrPort(a); err == nil && ap.Port() != 0 {
				own = append(own, ap)
			}
		}
		cfg.Egress = edge.EgressConfig{Listener: egressLn, Trust: c.EgressTrust, Own: own, BodyTimeout: c.BodyTimeout}
	}
	cfg.Logger, cfg.Registry = log, svc.Registry
	e, err := edge.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if err := e.Start(ctx); err != nil {
		return nil, errors.Join(err, e.Shutdown(context.Background()))
	}
	return e, nil
}

// urlHost is a URL's host:port, "" when it has none.
func urlHost(s string) string {
	u, err := url.Parse(s)
	if err != nil {
		return ""
	}
	return u.Host
}

func addrString(a net.Addr) string {
	if a == nil {
		return ""
	}
	return a.String()
}

// publicAddr is the address clients are told to connect to: the
// listener's, with a wildcard host replaced by loopback, which is what a
// laptop user can reach.
func publicAddr(a net.Addr) (string, int) {
	t := a.(*net.TCPAddr)
	if t.IP.IsUnspecified() {
		return "127.0.0.1", t.Port
	}
	return t.IP.String(), t.Port
}

// loadOrCreateKey keeps the cookie-signing key across restarts, so a
// restart of sbx dev does not sign everyone out.
func loadOrCreateKey(path string) ([]byte, error) {
	if b, err := os.ReadFile(path); err == nil && len(b) >= 32 {
		return b, nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("preview session key: %w", err)
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, fmt.Errorf("preview session key: %w", err)
	}
	return b, nil
}

// devSecretsKey is the secrets key sbx dev keeps in its data dir, made
// (0600) the first time: secrets stored by one run open in the next.
func devSecretsKey(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "keys", "secrets_key")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("secrets key: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return path, nil
	}
	if err != nil {
		return "", fmt.Errorf("secrets key: %w", err)
	}
	_, err = f.Write(lifecycle.NewSecretsKey())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = os.Remove(path)
		return "", fmt.Errorf("secrets key: %w", err)
	}
	return path, nil
}
