// Package edge wires the network edge: the SSH broker, the preview proxy
// (with its TLS), activity recording and the preview invalidation
// subscription, all talking to control through its internal API
// (edge/controlclient). It is to the edge what package control is to the
// control plane: cmd/edge maps flags onto a Config and calls Run, and
// `sbx dev` runs this same edge next to control in one process.
//
// The edge is stateless: everything it knows about sandboxes comes from
// control, cached briefly, and every replica serves any host.
package edge

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/controlclient"
	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/invalidation"
	"github.com/sbxedge/sbx/internal/metricsserver"
	"github.com/sbxedge/sbx/internal/netlimit/netlimitprom"
)

// Config is the edge's configuration. DefaultConfig sets the durations;
// callers fill in addresses, control and secrets.
type Config struct {
	// SSHAddr is where the SSH broker listens; SSHListener, when set, is
	// used instead (sbx dev binds it before control starts, because
	// control reports the broker's port).
	SSHAddr     string
	SSHListener net.Listener
	// HTTPAddr serves /healthz and /readyz; empty: not served.
	HTTPAddr string
	// MetricsAddr serves GET /metrics on a listener of its own; empty: not
	// served (sbx dev serves the shared registry from control). Metrics
	// name sandboxes, so bind it to loopback or a private address.
	MetricsAddr string
	// ControlURL is control's internal API; InternalSecret its bearer.
	ControlURL     string
	InternalSecret string
	// HostKeyDir holds the broker's ssh_host_*_key files (created when
	// missing), shared by every replica so clients never see a change.
	HostKeyDir string
	// CA signs upstream certificates: the internal user CA sandboxes
	// trust. When nil it is read from CAKeyFile (OpenSSH PEM), the key
	// control made, mounted from the same Secret. The edge signs each
	// upstream certificate itself, so a handshake never waits on control;
	// the price is holding the CA key, which is why certificates are
	// short-lived and sandboxes trust nothing else.
	CA        *sshca.CA
	CAKeyFile string
	// Drain is how long open SSH sessions may finish on shutdown.
	Drain time.Duration
	// ClientAlive and UpstreamAlive are the broker's keepalive intervals
	// (0 disables).
	ClientAlive, UpstreamAlive time.Duration
	// UpstreamTimeout bounds the dial and SSH handshake to a sandbox.
	UpstreamTimeout time.Duration
	// SSHMaxConns is the most client connections the broker holds at
	// once; beyond it new ones wait in the kernel's backlog, so no
	// flood takes every descriptor of the process (0:
	// DefaultSSHMaxConns).
	SSHMaxConns int
	// RedisURL is the one Redis the edge uses: activity marks (read by
	// control's idle detector), preview invalidations, login tickets and
	// certificates.
	RedisURL string
	// ActivityPrefix starts the activity keys; it must match control's
	// RedisPrefix.
	ActivityPrefix string
	// Activity, when set, records activity instead of a store on RedisURL
	// (sbx dev hands over control's in-process store). The edge does not
	// close it.
	Activity activity.Store
	// NoActivity records nothing. Only for a control plane without idle
	// offload, which would otherwise suspend sandboxes in use.
	NoActivity bool
	// Preview configures the preview proxy; empty Addr and nil Listener
	// disable it.
	Preview PreviewConfig
	// Egress configures the egress gateway; off when empty.
	Egress EgressConfig
	// ConnEvery is how often the connection log's batch goes to control
	// and ConnLease how long control keeps this edge's connections live
	// without one (connlog.RecorderConfig; zero: 1 s and 30 s). An edge
	// that dies leaves its connections live until the lease, then
	// control ends them as edge_lost.
	ConnEvery, ConnLease time.Duration
	Logger               *slog.Logger
	// Registry receives every metric; nil makes a fresh one with the Go
	// and process collectors.
	Registry *prometheus.Registry
}

// Connection ceilings when the Config names none. Each connection costs
// a descriptor (and a proxied one a second, upstream); these leave most
// of a process's usual limit (Go raises the soft RLIMIT_NOFILE to the
// hard one, often 2^20) to the other listeners and to control.
const (
	DefaultSSHMaxConns     = 8192
	DefaultPreviewMaxConns = 8192
	// The egress gateway holds one connection per open tunnel of every
	// sandbox behind this edge.
	DefaultEgressMaxConns = 8192
	// health and ACME HTTP-01 listeners: probes, challenges, redirects.
	smallMaxConns = 256
)

// DefaultConfig returns a Config with every duration set.
func DefaultConfig() Config {
	return Config{
		Drain: 30 * time.Second, ClientAlive: 30 * time.Second, UpstreamAlive: 30 * time.Second,
		UpstreamTimeout: sshbroker.DefaultConfig().UpstreamDialTimeout,
		ActivityPrefix:  "sbx:activity:",
		Preview:         PreviewConfig{RouteTTL: 5 * time.Second},
	}
}

// Validate names every missing or bad field. It has no side effects.
func (c *Config) Validate() error {
	var errs []error
	if c.SSHAddr == "" && c.SSHListener == nil {
		errs = append(errs, errors.New("edge: SSHAddr is empty"))
	}
	if c.ControlURL == "" {
		errs = append(errs, errors.New("edge: ControlURL is required"))
	}
	if c.InternalSecret == "" {
		errs = append(errs, errors.New("edge: InternalSecret is required"))
	}
	if c.HostKeyDir == "" {
		errs = append(errs, errors.New("edge: HostKeyDir is required"))
	}
	if c.CA == nil && c.CAKeyFile == "" {
		errs = append(errs, errors.New("edge: CA or CAKeyFile is required"))
	}
	if c.Drain < 0 || c.ClientAlive < 0 || c.UpstreamAlive < 0 {
		errs = append(errs, errors.New("edge: Drain and the keepalive intervals must not be negative"))
	}
	if c.SSHMaxConns < 0 || c.Preview.MaxConns < 0 || c.Preview.BodyTimeout < 0 {
		errs = append(errs, errors.New("edge: SSHMaxConns, Preview.MaxConns and Preview.BodyTimeout must not be negative"))
	}
	if c.UpstreamTimeout <= 0 {
		errs = append(errs, errors.New("edge: UpstreamTimeout must be positive"))
	}
	if c.RedisURL == "" && c.Activity == nil && !c.NoActivity {
		errs = append(errs, errors.New("edge: a Redis URL is required: control's idle detector reads activity from it "+
			"and would suspend sandboxes in use through this edge; opt out only when control runs without idle offload"))
	}
	errs = append(errs, c.Preview.validate(c.RedisURL != ""), c.Egress.validate())
	return errors.Join(errs...)
}

// Edge is a running (or ready to run) edge.
type Edge struct {
	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	ready  atomic.Bool
	cc     *controlclient.Client
	rdb    *redis.Client // nil without RedisURL
	act    activity.Store
	closeA func() error // closes act when the edge opened it
	// conns is the connection log; stopConns ends its batching (a last
	// batch closes what is still open) and waits for it.
	conns     *connlog.Recorder
	stopConns func()

	broker *sshbroker.Broker
	sshLn  net.Listener
	prev   *previewServer // nil when previews are off
	health *server        // nil without HTTPAddr
	egress *egressServer  // nil when the gateway is off
	// metrics serves /metrics from Start until close; nil without
	// MetricsAddr.
	metrics *metricsserver.Server
	limits  *netlimitprom.Collectors // every listener's series

	servers []*server                                     // started, in start order
	failed  chan error                                    // the first server that stopped on its own
	stopSub func()                                        // stops the invalidation subscription
	inv     []func(context.Context, edgeapi.Invalidation) // told what control invalidated
}

// Open builds every part, checks that control answers, and binds the
// listeners; it serves nothing until Start.
func Open(ctx context.Context, cfg Config) (_ *Edge, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Defaults only once the configuration is known good.
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Registry = cmp.Or(cfg.Registry, metricsserver.NewRegistry())
	e := &Edge{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, failed: make(chan error, 1)}
	if e.limits, err = netlimitprom.For(e.reg); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = e.close()
			// Listeners handed in are the edge's from here on.
			for _, ln := range []net.Listener{cfg.SSHListener, cfg.Preview.Listener, cfg.Egress.Listener} {
				if ln != nil {
					_ = ln.Close()
				}
			}
		}
	}()
	if cfg.CA == nil {
		if e.cfg.CA, err = sshca.Load(cfg.CAKeyFile); err != nil {
			return nil, err
		}
		cfg.CA = e.cfg.CA
	}
	hostKeys, err := sshbroker.LoadOrCreateHostKeys(cfg.HostKeyDir)
	if err != nil {
		return nil, fmt.Errorf("broker host keys: %w", err)
	}
	if e.cc, err = controlclient.New(controlclient.Config{BaseURL: cfg.ControlURL, Secret: cfg.InternalSecret}); err != nil {
		return nil, err
	}
	// First of the invalidation receivers: the proxy's re-check of the
	// connections a revoked token admitted asks the client's token cache.
	e.inv = append(e.inv, e.cc.Invalidate)
	// Fail fast on a wrong URL or secret instead of refusing every SSH
	// login later with an opaque error.
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = e.cc.Health(hctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reach control's internal API: %w", err)
	}
	if err := e.openRedis(); err != nil {
		return nil, err
	}
	if e.conns, err = connlog.NewRecorder(connlog.RecorderConfig{
		Reporter: "edge-" + connlog.NewID()[2:14], Sink: e.cc, Every: cfg.ConnEvery, Lease: cfg.ConnLease,
		Source: "edge", Registry: e.reg, Logger: e.log.With("component", "connlog"),
	}); err != nil {
		return nil, err
	}

	bcfg := sshbroker.DefaultConfig()
	bcfg.HostKeys = hostKeys
	bcfg.Authorizer = e.cc
	// Key holders connecting to a suspended sandbox wait while control
	// restores it.
	bcfg.Waker = e.cc
	if e.act != nil {
		bcfg.Activity = e.act
	}
	bcfg.CA = cfg.CA
	bcfg.Connections = e.conns
	bcfg.Registry = e.reg
	bcfg.Logger = e.log.With("component", "sshbroker")
	bcfg.DrainPeriod = cfg.Drain
	bcfg.ClientAliveInterval = cfg.ClientAlive
	bcfg.UpstreamAliveInterval = cfg.UpstreamAlive
	bcfg.UpstreamDialTimeout = cfg.UpstreamTimeout
	if e.broker, err = sshbroker.New(bcfg); err != nil {
		return nil, err
	}
	// A sandbox that ended or was suspended drops the broker's cached
	// routes to it, and ends its open SSH connections with the reason.
	e.inv = append(e.inv, e.broker.Revoke)
	if e.sshLn, err = e.listen(cfg.SSHListener, cfg.SSHAddr, "SSH", cmp.Or(cfg.SSHMaxConns, DefaultSSHMaxConns)); err != nil {
		return nil, err
	}
	if cfg.Preview.enabled() {
		if e.prev, err = e.openPreview(ctx); err != nil {
			return nil, err
		}
		e.inv = append(e.inv, e.prev.proxy.Revoke)
	}
	if cfg.HTTPAddr != "" {
		if e.health, err = e.openHealth(cfg.HTTPAddr); err != nil {
			return nil, err
		}
	}
	if cfg.Egress.enabled() {
		if e.egress, err = e.openEgress(); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// SSHAddr is where the broker listens.
func (e *Edge) SSHAddr() net.Addr { return e.sshLn.Addr() }

// PreviewAddr is where previews are served, nil when they are off.
func (e *Edge) PreviewAddr() net.Addr {
	if e.prev == nil {
		return nil
	}
	return e.prev.ln.Addr()
}

// MetricsAddr is the metrics listener's address, nil when off or before
// Start.
func (e *Edge) MetricsAddr() net.Addr {
	if e.metrics == nil {
		return nil
	}
	return e.metrics.Addr()
}

// HTTPAddr is the health listener's address, nil when off.
func (e *Edge) HTTPAddr() net.Addr {
	if e.health == nil {
		return nil
	}
	return e.health.ln.Addr()
}

// Ready reports whether the edge serves (Start succeeded, Shutdown not
// begun).
func (e *Edge) Ready() bool { return e.ready.Load() }

// Invalidate applies one of control's invalidations at once: the proxy
// and the SSH broker drop what they cached and end the connections no
// longer admitted (preview.Proxy.Revoke, sshbroker.Broker.Revoke). The
// Redis subscription calls it; sbx dev without Redis calls it from control
// in process.
func (e *Edge) Invalidate(ctx context.Context, inv edgeapi.Invalidation) {
	for _, f := range e.inv {
		f(ctx, inv)
	}
	e.log.Debug("invalidation applied", "kind", inv.Kind, "label", inv.Label, "sandbox_id", inv.SandboxID, "account_id", inv.AccountID)
}

// Start subscribes to invalidations and serves. /readyz turns 200 once
// everything serves.
func (e *Edge) Start(ctx context.Context) error {
	if e.rdb != nil {
		// Subscribed before serving, so an invalidation published right
		// after start is not missed.
		e.stopSub = invalidation.Subscribe(e.rdb, e.Invalidate, e.log)
	}
	cctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	connsDone := make(chan struct{})
	go func() {
		defer close(connsDone)
		e.conns.Run(cctx)
	}()
	e.stopConns = func() { stop(); <-connsDone }
	e.serve(&server{name: "SSH broker", ln: e.sshLn, serve: e.broker.Serve, closed: sshbroker.ErrServerClosed})
	if e.prev != nil {
		if err := e.prev.start(ctx, e.log, e.serve); err != nil {
			return err
		}
	}
	if e.health != nil {
		e.serve(e.health)
	}
	if e.egress != nil {
		e.serve(e.egress.server())
	}
	if e.cfg.MetricsAddr != "" {
		var err error
		if e.metrics, err = metricsserver.Start(e.cfg.MetricsAddr, e.reg, e.log, e.limits); err != nil {
			return err
		}
	}
	e.ready.Store(true)
	e.log.InfoContext(ctx, "edge ready", "ssh", e.sshLn.Addr().String(), "control", e.cfg.ControlURL)
	return nil
}

// serve runs s until it is shut down; a server that stops on its own is
// reported on e.failed.
func (e *Edge) serve(s *server) {
	s.done = make(chan error, 1)
	e.servers = append(e.servers, s)
	go func() {
		err := s.serve(s.ln)
		if err != nil && !errors.Is(err, s.closed) {
			select {
			case e.failed <- fmt.Errorf("serve %s: %w", s.name, err):
				err = nil // reported once, there
			default:
			}
		}
		s.done <- err
	}()
}

// Failed receives the error of a server that stopped without Shutdown.
func (e *Edge) Failed() <-chan error { return e.failed }

// Shutdown turns /readyz to 503 (so the load balancer stops sending new
// connections), lets open SSH sessions drain and requests finish until
// ctx ends, then releases everything.
func (e *Edge) Shutdown(ctx context.Context) error {
	e.ready.Store(false)
	e.log.Info("edge shutting down", "drain", e.cfg.Drain)
	// Every listener stops accepting at once and drains for the same
	// period, as the broker does its sessions; requests still open when
	// it ends (a streaming preview, a download) are cut by close below.
	// That is the drain's designed end, not a failure: one open preview
	// stream made the edge wait for ctx and exit with an error.
	drain, cancel := context.WithTimeout(ctx, e.cfg.Drain)
	defer cancel()
	var (
		mu   sync.Mutex // guards errs
		errs []error
		wg   sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	wg.Go(func() {
		if err := e.broker.Shutdown(ctx); err != nil {
			fail(fmt.Errorf("shutdown SSH broker: %w", err))
		}
	})
	for _, s := range e.servers {
		if s.shutdown == nil {
			continue
		}
		wg.Go(func() {
			err := s.shutdown(drain)
			switch {
			case err == nil:
			case drain.Err() != nil && ctx.Err() == nil:
				e.log.Info("drain over; closing what is still open", "server", s.name)
			default:
				fail(fmt.Errorf("shutdown %s: %w", s.name, err))
			}
		})
	}
	wg.Wait()
	errs = append(errs, e.close())
	return errors.Join(errs...)
}

// close stops every server that still runs, waits for each, and releases
// the parts in reverse order of Open.
func (e *Edge) close() error {
	var errs []error
	if e.broker != nil {
		_ = e.broker.Close()
	}
	for _, s := range e.servers {
		if s.close != nil {
			_ = s.close()
		}
		if err := <-s.done; err != nil && !errors.Is(err, s.closed) {
			errs = append(errs, fmt.Errorf("serve %s: %w", s.name, err))
		}
	}
	e.servers = nil
	if e.sshLn != nil {
		_ = e.sshLn.Close() // when Start never ran
	}
	if e.stopSub != nil {
		e.stopSub()
		e.stopSub = nil
	}
	if e.prev != nil {
		errs = append(errs, e.prev.close())
		e.prev = nil
	}
	if e.health != nil {
		_ = e.health.ln.Close()
		e.health = nil
	}
	if e.egress != nil {
		_ = e.egress.ln.Close() // when Start never ran
		e.egress = nil
	}
	if e.metrics != nil {
		errs = append(errs, e.metrics.Close())
		e.metrics = nil
	}
	if e.stopConns != nil {
		// After every server and the proxy: their connections are closed,
		// and the last batch says so.
		e.stopConns()
		e.stopConns = nil
	}
	if e.closeA != nil {
		errs = append(errs, e.closeA())
		e.closeA = nil
	}
	if e.rdb != nil {
		errs = append(errs, e.rdb.Close())
		e.rdb = nil
	}
	return errors.Join(errs...)
}

// Run opens and starts the edge, serves until ctx ends (or a server
// fails), then shuts down with the drain period. ready, if set, sees the
// running edge.
func Run(ctx context.Context, cfg Config, ready func(*Edge)) error {
	e, err := Open(ctx, cfg)
	if err != nil {
		return err
	}
	if err := e.Start(ctx); err != nil {
		return errors.Join(err, e.close())
	}
	if ready != nil {
		ready(e)
	}
	var errs []error
	select {
	case <-ctx.Done():
	case err := <-e.failed:
		errs = append(errs, err)
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Drain+5*time.Second)
	defer cancel()
	return errors.Join(append(errs, e.Shutdown(sctx))...)
}

// server is one listener the edge serves.
type server struct {
	name     string
	ln       net.Listener
	serve    func(net.Listener) error
	closed   error                           // what serve returns after shutdown
	shutdown func(ctx context.Context) error // graceful; nil: close only
	close    func() error
	done     chan error
}
