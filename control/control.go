// Package control wires the control plane: store, provider, pod
// connection pool, lifecycle and REST API. It is the one place concrete
// backends are chosen from configuration.
package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/connections"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/webhook"
	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/invalidation"
	"github.com/sbxedge/sbx/internal/metricsserver"
	"github.com/sbxedge/sbx/internal/netlimit"
	"github.com/sbxedge/sbx/internal/netlimit/netlimitprom"
	"github.com/sbxedge/sbx/internal/podssh"
)

// Config is the control plane's configuration.
type Config struct {
	// DataDir holds keys, and whatever the injected store and provider
	// keep on this machine (sbx dev: the SQLite database, sandboxes).
	DataDir string
	// SecretsKeyFile holds the key account secrets are sealed with (see
	// lifecycle.ParseSecretsKey). Empty: POST /secrets is 503 and a
	// create naming secrets is refused.
	SecretsKeyFile string
	// DatabaseURL selects Postgres (postgres://...). Empty: Store opens
	// the store.
	DatabaseURL string
	// APIAddr is where the REST API listens (host:port; port 0 picks one).
	APIAddr string
	// SSHHost and SSHPort are the SSH broker's public address, reported
	// as ssh_endpoint.
	SSHHost string
	SSHPort int
	// PreviewDomain, PreviewScheme and PreviewPort shape the URLs of
	// exposed ports (see api.Config); an empty PreviewDomain disables them.
	PreviewDomain string
	PreviewScheme string
	PreviewPort   int
	// PreviewChanged is told when preview authority changes (a port
	// changed or was removed, a sandbox changed state, a token was
	// revoked, the members file changed), so edges drop what they cached
	// and end the connections it no longer admits. Nil: published on
	// Redis when RedisURL is set (see previewpub.go).
	PreviewChanged func(ctx context.Context, inv edgeapi.Invalidation) error
	// PreviewMembersFile maps OIDC identities to accounts (a JSON list of
	// previewroute.Membership); the internal API answers the edge from it.
	PreviewMembersFile string
	// MetricsAddr serves GET /metrics on a listener of its own; empty: not
	// served. Metrics name accounts, so bind it to loopback or a private
	// address, never next to the public API.
	MetricsAddr string
	// InternalAddr is where the internal API (/internal/v1, for the edge)
	// listens; empty means it is not served. Bind it to a private address
	// (sbx dev: loopback): it must never be public.
	InternalAddr string
	// InternalSecret is the bearer token the edge presents to the internal
	// API; required when InternalAddr is set.
	InternalSecret string
	// ReservedPorts are ports this host serves itself on the network its
	// sandboxes share (sbx dev: local sandboxes share its loopback), each
	// mapped to what listens there ("sbx dev's own SSH broker"). Exposing
	// one is refused: its preview would publish the host's server.
	// Production sets none: pods have a network of their own.
	ReservedPorts map[int]string
	// ReserveOwnPorts, when set, names this process ("sbx dev") and
	// reserves control's own listeners too (REST API, metrics, internal
	// API) as "<name>'s own REST API" and so on, once bound and before the
	// API serves, so ports picked at random are covered.
	ReserveOwnPorts string
	// Provider builds where sandboxes run; required. The binary chooses
	// it: cmd/control Kubernetes, sbx dev and tests this machine
	// (standalone.Local), so this package links no provider.
	Provider ProviderOpener
	// Store opens the store when DatabaseURL names no Postgres (sbx dev:
	// standalone.SQLite); one of the two is required.
	Store StoreOpener
	// Activity is the activity store when RedisURL names no Redis: one
	// process's own (sbx dev: standalone's in memory, which its edge
	// shares). One of the two is required; control closes it.
	Activity activity.Store
	// JobsInstance names this process's job client the same way across
	// its restarts (store.JobsConfig.Instance): at start, jobs a crashed
	// run of it left running are retried at once instead of after the
	// stuck-job rescue. It must differ from every other live control on
	// the database (sbx dev: derived from the locked data dir; a replica:
	// its pod's name). Empty: a fresh ID each start. At most 100 bytes.
	JobsInstance string
	// NoJobs serves the API without working the job queue: state changes
	// and their jobs are committed but nothing carries them forward. For
	// maintenance windows and crash tests.
	NoJobs bool
	// Lifecycle tunes deadlines, provisioning timeout and reaper tick.
	Lifecycle lifecycle.Config
	// RedisURL selects the shared activity store (redis://...). Empty:
	// Activity, valid for one process only.
	RedisURL string
	// RedisPrefix starts every activity key, so deployments (or tests) can
	// share a Redis (default "sbx:activity:").
	RedisPrefix string
	// ActivityRetry is how long marks that could not reach Redis are
	// retried before they are dropped and counted (default 30 s).
	ActivityRetry time.Duration
	// WakeTimeout bounds how long an API call on a suspended sandbox is
	// held while it wakes (default 60 s).
	WakeTimeout time.Duration
	// MCPExecBound is api.Config's.
	MCPExecBound time.Duration
	// MCPSessionIdle is api.Config's.
	MCPSessionIdle time.Duration
	// StreamOrigins are browser origins (host[:port] patterns) besides the
	// API's own that may open terminal streams (api.Config).
	StreamOrigins []string
	// APIMaxConns and InternalMaxConns are the most connections the REST
	// API and the internal API hold at once; beyond them new connections
	// wait in the kernel's backlog, so no flood of clients takes every
	// descriptor of the process (0: DefaultAPIMaxConns,
	// DefaultInternalMaxConns).
	APIMaxConns, InternalMaxConns int
	// BodyTimeout bounds a request body on both APIs before its sender
	// authenticated, and any body's stall after (httplimit.BodyDeadline;
	// 0: httplimit.DefaultBodyTimeout).
	BodyTimeout time.Duration
	// Webhook tunes webhook delivery: the ranges trusted as receivers
	// (--webhook-trust), the retry schedule. SSHHost, SSHPort, Provider
	// and Host are filled in from the rest of the config.
	Webhook webhook.Config
	// WebhookResolver and WebhookDialer replace the system's for webhook
	// deliveries (tests: a dialer that refuses to leave loopback).
	WebhookResolver webhook.Resolver
	WebhookDialer   webhook.Dialer
	// ConnLease is the lease on the live connections control's own
	// streams record (terminal, exec stream, MCP); ConnMaxLease caps the
	// lease any reporter may ask for, and ConnSweepEvery is how often
	// lapsed leases are settled as edge_lost. Zero: 30 s, 45 s, 10 s
	// (connections.Config), settled within a minute.
	ConnLease, ConnMaxLease, ConnSweepEvery time.Duration
	// AlsoReady, when set, must report true too before /readyz answers
	// 200: sbx dev waits for the edge it runs next to control.
	AlsoReady func() bool
	Logger    *slog.Logger
	// Registry receives every metric; nil makes a fresh one.
	Registry *prometheus.Registry
}

// Validate checks the configuration without side effects.
func (c *Config) Validate() error {
	if c.DataDir == "" {
		return errors.New("control: DataDir is required")
	}
	if c.APIAddr == "" {
		return errors.New("control: APIAddr is required")
	}
	if c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://") {
		return fmt.Errorf("control: DatabaseURL %q: only postgres:// URLs are supported", c.DatabaseURL)
	}
	if c.DatabaseURL == "" && c.Store == nil {
		return errors.New("control: DatabaseURL (Postgres) is required, or a Store (one machine: standalone.SQLite)")
	}
	if c.RedisURL == "" && c.Activity == nil {
		return errors.New("control: RedisURL is required, or an Activity store (one process: standalone's in memory)")
	}
	if c.Provider == nil {
		return errors.New("control: Provider is required (one machine: standalone.Local)")
	}
	if c.InternalAddr != "" && c.InternalSecret == "" {
		return errors.New("control: InternalSecret is required when InternalAddr is set")
	}
	if c.APIMaxConns < 0 || c.InternalMaxConns < 0 || c.BodyTimeout < 0 {
		return errors.New("control: APIMaxConns, InternalMaxConns and BodyTimeout must not be negative")
	}
	if len(c.JobsInstance) > maxJobsInstance {
		return fmt.Errorf("control: JobsInstance %q: longer than %d bytes", c.JobsInstance, maxJobsInstance)
	}
	return nil
}

// Connection ceilings when the Config names none. A client holds one
// descriptor per connection; these leave most of a process's usual limit
// (Go raises the soft RLIMIT_NOFILE to the hard one, often 2^20) to
// pods, the database and the other listeners.
const (
	DefaultAPIMaxConns      = 4096
	DefaultInternalMaxConns = 1024
)

// maxJobsInstance is River's limit on a client ID.
const maxJobsInstance = 100

// Service is a running control plane.
type Service struct {
	cfg      Config
	log      *slog.Logger
	Store    store.Store
	CA       *sshca.CA
	Provider provider.Provider
	Pool     *podssh.Pool
	Life     *lifecycle.Manager
	Hooks    *webhook.Hub
	Registry *prometheus.Registry
	// Conns stores the connection log; connRec records control's own
	// streams into it.
	Conns   *connections.Log
	connRec *connlog.Recorder
	// Activity is shared with the edge run in the same process (sbx dev).
	Activity activity.Store
	rdb      *redis.Client // the process's one Redis client; nil without RedisURL
	// previewChanged tells edges and control's own streams what changed.
	previewChanged func(ctx context.Context, inv edgeapi.Invalidation) error
	// subscribe: invalidations reach this replica's streams through Redis
	// (stopSub ends the subscription), not in-process.
	subscribe bool
	stopSub   func()
	// stopWatch stops the watchers of previewwatch.go; watchers waits
	// for them.
	stopWatch context.CancelFunc
	watchers  sync.WaitGroup

	api   *api.Server
	srv   *http.Server
	ln    net.Listener
	ready atomic.Bool
	done  chan error

	internal *internalServer          // nil unless Config.InternalAddr is set
	metrics  *metricsserver.Server    // nil unless Config.MetricsAddr is set
	limits   *netlimitprom.Collectors // the listeners' series, from Start

	shutdownOnce sync.Once
	shutdownErr  error
}

// Open builds every part but starts nothing.
func Open(ctx context.Context, cfg Config) (_ *Service, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Defaults only once the configuration is known good.
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	cfg.Registry = cmp.Or(cfg.Registry, metricsserver.NewRegistry())
	s := &Service{cfg: cfg, log: cfg.Logger, Registry: cfg.Registry, done: make(chan error, 1)}
	defer func() {
		if err != nil {
			s.closeParts()
		}
	}()

	if cfg.SecretsKeyFile != "" {
		b, err := os.ReadFile(cfg.SecretsKeyFile)
		if err != nil {
			return nil, fmt.Errorf("secrets key: %w", err)
		}
		if cfg.Lifecycle.SecretsKey, err = lifecycle.ParseSecretsKey(b); err != nil {
			return nil, fmt.Errorf("%s: %w", cfg.SecretsKeyFile, err)
		}
	}
	keys := filepath.Join(cfg.DataDir, "keys")
	if s.CA, err = sshca.LoadOrCreate(filepath.Join(keys, "user_ca")); err != nil {
		return nil, err
	}
	hostKeys, err := hostkey.LoadOrCreate(filepath.Join(keys, "host_key_secret"))
	if err != nil {
		return nil, err
	}
	// Stream tickets are sealed with a key every replica derives alike.
	ticketKey, err := hostKeys.Bytes("sbx exec stream tickets", 32)
	if err != nil {
		return nil, err
	}
	if s.Store, err = openStore(ctx, cfg); err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	if s.Provider, err = openProvider(ctx, cfg, s.Store); err != nil {
		return nil, err
	}
	s.Pool = podssh.NewPool(s.CA, cfg.Logger, podssh.WithKeyID("control"))
	if s.rdb, err = redisstore.OpenClient(cfg.RedisURL, cfg.Logger); err != nil {
		return nil, err
	}
	if s.Activity, err = openActivity(cfg, s.rdb); err != nil {
		return nil, err
	}
	edgeChanged := cfg.PreviewChanged
	if edgeChanged == nil {
		edgeChanged = previewPublisher(s.rdb)
	}
	// Control's own exec and terminal streams obey every invalidation
	// too (api.Server.Invalidate): through the Redis channel when control
	// publishes there, which carries other replicas' invalidations as
	// well (see Start), and in-process otherwise.
	s.subscribe = cfg.PreviewChanged == nil && s.rdb != nil
	previewChanged := func(ctx context.Context, inv edgeapi.Invalidation) error {
		if !s.subscribe {
			s.api.Invalidate(ctx, inv)
		}
		if edgeChanged == nil {
			return nil
		}
		return edgeChanged(ctx, inv)
	}
	s.previewChanged = previewChanged
	wcfg := cfg.Webhook
	wcfg.SSHHost, wcfg.SSHPort = cfg.SSHHost, cfg.SSHPort
	wcfg.Provider, wcfg.Host = providerName(s.Provider)
	// Own reads the Manager's reserved ports, filled in below and as
	// listeners bind: s.Life is set before any delivery runs.
	own := func(port int) (string, bool) { return s.Life.ReservedPort(port) }
	if s.Hooks, err = webhook.New(wcfg, webhook.Deps{
		Store: s.Store, Secrets: hostKeys, Resolver: cfg.WebhookResolver, Dialer: cfg.WebhookDialer, Logger: cfg.Logger, Own: own,
	}); err != nil {
		return nil, err
	}
	lifeActivity := stateNotifier{Activity: s.Activity, changed: previewChanged, log: cfg.Logger}
	s.Life = lifecycle.New(cfg.Lifecycle, lifecycle.Deps{
		Store: s.Store, Provider: s.Provider, HostKeys: hostKeys, UserCAKey: s.CA.AuthorizedKey(),
		Conns: s.Pool, Pods: s.Pool, Logger: cfg.Logger, Metrics: lifecycle.NewMetrics(cfg.Registry),
		Activity: lifeActivity, Events: s.Hooks,
	})
	cfg.Registry.MustRegister(s.Life.NewGauges())
	for port, what := range cfg.ReservedPorts {
		s.Life.ReservePort(port, what)
	}
	s.Conns = connections.New(s.Store, connections.Config{MaxLease: cfg.ConnMaxLease, SweepEvery: cfg.ConnSweepEvery, Logger: cfg.Logger})
	if s.connRec, err = connlog.NewRecorder(connlog.RecorderConfig{
		Reporter: "control-" + connlog.NewID()[2:14], Sink: s.Conns, Lease: cfg.ConnLease,
		Source: "control", Registry: cfg.Registry, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	s.api = api.New(api.Config{
		SSHHost: cfg.SSHHost, SSHPort: cfg.SSHPort,
		PreviewDomain: cfg.PreviewDomain, PreviewScheme: cfg.PreviewScheme, PreviewPort: cfg.PreviewPort,
		WakeTimeout: cfg.WakeTimeout, StreamOrigins: cfg.StreamOrigins, MCPExecBound: cfg.MCPExecBound, MCPSessionIdle: cfg.MCPSessionIdle,
	}, api.Deps{
		Store: s.Store, Lifecycle: s.Life, Pods: s.Pool, Logger: cfg.Logger,
		Registry: cfg.Registry, Ready: s.isReady, PreviewChanged: previewChanged,
		Activity: s.Activity, Tickets: streamTickets(s.rdb), TicketKey: ticketKey, Webhooks: s.Hooks,
		Connections: s.connRec,
	})
	return s, nil
}

// Start listens, reconciles records with the provider, and starts the job
// queue. readyz turns 200 once all of that succeeded.
func (s *Service) Start(ctx context.Context) (err error) {
	if s.limits, err = netlimitprom.For(s.Registry); err != nil {
		return err
	}
	ln, err := s.listen(s.cfg.APIAddr, "API", cmp.Or(s.cfg.APIMaxConns, DefaultAPIMaxConns))
	if err != nil {
		return err
	}
	s.ln = ln
	defer func() {
		if err != nil && s.srv == nil {
			_ = ln.Close() // not served yet: Shutdown would not close it
		}
	}()
	s.reserveOwn(ln.Addr(), "REST API")
	// Every listener is bound, and reserved, before the API serves: no
	// request can expose a port of this process before it is reserved.
	if s.cfg.MetricsAddr != "" {
		if s.metrics, err = metricsserver.Start(s.cfg.MetricsAddr, s.Registry, s.log, s.limits); err != nil {
			return err
		}
		s.reserveOwn(s.metrics.Addr(), "metrics listener")
	}
	wctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.stopWatch = stop
	s.startRevocationWatch(wctx)
	if err := s.startInternal(wctx); err != nil {
		return err
	}

	s.srv = &http.Server{
		// Slow-header clients are cut off early, and bodies by the
		// deadline on them (which moves with an authenticated upload);
		// no global ReadTimeout or WriteTimeout, which would cut
		// legitimate long streams.
		Handler:           httplimit.BodyDeadline{Timeout: s.cfg.BodyTimeout}.Wrap(s.api.Handler()),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	// Event streams never go idle on their own; end them when shutting
	// down so Shutdown does not wait for its deadline.
	s.srv.RegisterOnShutdown(s.api.StopStreams)
	if s.subscribe {
		// Subscribed before serving, so no stream opens unwatched.
		s.stopSub = invalidation.Subscribe(s.rdb, s.api.Invalidate, s.log)
	}
	go func() { s.done <- s.srv.Serve(ln) }()

	if err := s.startProvider(ctx); err != nil {
		return err
	}
	if err := s.Life.Reconcile(ctx); err != nil {
		// Reconcile errors are per sandbox; serving the rest is better
		// than refusing to start.
		s.log.ErrorContext(ctx, "reconcile finished with errors", "err", err)
	}
	// Then again every interval, stopped and waited for with the
	// watchers on Shutdown. Every replica runs it; a pass ends a sandbox
	// only under its row lock, so two replicas agree.
	s.watchers.Go(func() { s.Life.ReconcileEvery(wctx) })
	// The connection log: control's own streams' batches, and the sweep
	// that ends the connections of reporters that stopped renewing.
	s.watchers.Go(func() { s.connRec.Run(wctx) })
	s.watchers.Go(func() { s.api.RunMCPSessions(wctx) })
	s.watchers.Go(func() { s.Conns.SweepEvery(wctx) })
	if !s.cfg.NoJobs {
		jobs := s.Life.Jobs()
		river.AddWorker(jobs.Workers, s.Hooks.Worker())
		jobs.Instance = s.cfg.JobsInstance
		if err := s.Store.StartJobs(ctx, jobs); err != nil {
			return fmt.Errorf("start job queue: %w", err)
		}
	}
	s.ready.Store(true)
	s.log.InfoContext(ctx, "control ready", "api", s.URL())
	return nil
}

// listen binds addr for one of control's servers, with its ceiling
// and accept errors survived (netlimit).
func (s *Service) listen(addr, name string, maxConns int) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for %s on %s: %w", name, addr, err)
	}
	return s.limits.Wrap(ln, netlimit.Config{Name: name, MaxConns: maxConns, Logger: s.log}), nil
}

// reserveOwn reserves the port of one of control's own listeners, if
// Config.ReserveOwnPorts asks for it.
func (s *Service) reserveOwn(a net.Addr, what string) {
	if s.cfg.ReserveOwnPorts == "" {
		return
	}
	s.Life.ReservePort(a.(*net.TCPAddr).Port, s.cfg.ReserveOwnPorts+"'s own "+what)
}

func (s *Service) isReady() bool {
	return s.ready.Load() && (s.cfg.AlsoReady == nil || s.cfg.AlsoReady())
}

// MetricsAddr is where metrics are served, nil when they are not.
func (s *Service) MetricsAddr() net.Addr {
	if s.metrics == nil {
		return nil
	}
	return s.metrics.Addr()
}

// URL is the API's base URL.
func (s *Service) URL() string { return "http://" + s.ln.Addr().String() }

// Shutdown stops serving, stops the job queue (running jobs finish or are
// retried on the next start), closes pod connections and the provider's
// servers (workspaces stay), then the store.
//
// Shutdown may be called again; later calls return the first's result.
func (s *Service) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Service) shutdown(ctx context.Context) error {
	s.ready.Store(false)
	var errs []error
	if s.srv != nil {
		if err := s.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("shutdown API: %w", err))
			_ = s.srv.Close()
		}
		if err := <-s.done; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	}
	if s.internal != nil {
		errs = append(errs, s.internal.shutdown(ctx))
	}
	if s.metrics != nil {
		errs = append(errs, s.metrics.Shutdown(ctx))
	}
	if s.stopWatch != nil {
		s.stopWatch()
	}
	s.watchers.Wait()
	if s.stopSub != nil {
		s.stopSub()
	}
	if s.Store != nil && !s.cfg.NoJobs {
		if err := s.Store.StopJobs(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stop jobs: %w", err))
		}
	}
	errs = append(errs, s.closeParts())
	return errors.Join(errs...)
}

func (s *Service) closeParts() error {
	var errs []error
	if s.Hooks != nil {
		s.Hooks.Close()
	}
	if s.Pool != nil {
		errs = append(errs, s.Pool.Close())
	}
	if c, ok := s.Provider.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	if s.Activity != nil {
		errs = append(errs, s.Activity.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	return errors.Join(errs...)
}
