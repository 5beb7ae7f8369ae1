// Package api is control's public REST surface, /api/v1. Handlers decode,
// call lifecycle or the pod connection pool, and encode; every error goes
// through writeError, the one place errors become problem documents.
package api

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/mcpserver"
	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/nonces"
	"github.com/sbxedge/sbx/internal/podssh"
)

//go:embed openapi.json
var openAPIDoc []byte

// OpenAPI returns the API contract served at /api/v1/openapi.json.
func OpenAPI() []byte { return openAPIDoc }

// Pods is the subset of the pod connection pool the API uses.
type Pods interface {
	Exec(ctx context.Context, t podssh.Target, req podssh.ExecRequest) (podssh.ExecResult, error)
	Terminal(ctx context.Context, t podssh.Target, req podssh.TerminalRequest) (*podssh.Terminal, error)
	// The files API's SFTP client lives on the pool's connection.
	podfiles.Conns
}

// Store is the subset of store.Store the API uses: reads only. Every
// write goes through control/lifecycle, which owns the transactions.
type Store interface {
	store.Reader
	// SubscribeEvents signals new events of a sandbox (event streams).
	SubscribeEvents(sandboxID string) (<-chan struct{}, func())
}

// Config tunes the API.
type Config struct {
	// SSHHost and SSHPort are the public address of the SSH broker, shown
	// as ssh_endpoint once a sandbox is ready.
	SSHHost string
	SSHPort int
	// PreviewDomain is the preview proxy's base domain
	// ("preview.example.com"); a port's URL is <label>.<PreviewDomain>.
	// Empty disables POST /ports.
	PreviewDomain string
	// PreviewScheme is "https" (default) or "http" (sbx dev).
	PreviewScheme string
	// PreviewPort is shown in preview URLs unless it is the scheme's
	// default; 0 omits it.
	PreviewPort int
	// MaxJSONBody bounds request bodies other than file uploads (1 MiB).
	MaxJSONBody int64
	// MaxFileSize bounds one uploaded file (default 5 GiB).
	MaxFileSize int64
	// ExecOutputLimit caps each of stdout and stderr (default 1 MiB).
	ExecOutputLimit int
	// MaxExecTimeout bounds timeout_seconds (default 1 h).
	MaxExecTimeout time.Duration
	// StreamOrigins are the browser origins (host[:port] patterns, as
	// path.Match reads them) besides the API's own that may open terminal
	// streams; a page elsewhere cannot drive a terminal with a ticket it
	// got hold of.
	StreamOrigins []string
	// MCPExecBound is how long an MCP exec_in_sandbox or wait_exec call
	// waits on its command before it answers with the command's handle
	// (default mcpserver.DefaultExecBound).
	MCPExecBound time.Duration
	// WakeTimeout is how long an exec or files call on a suspended
	// sandbox is held while it wakes before 503 with Retry-After
	// (default 60 s).
	WakeTimeout time.Duration
	// MCPSessionIdle is how long an MCP session lasts in the connection
	// log without a request (default 1 min, as a preview's).
	MCPSessionIdle time.Duration
}

func (c *Config) setDefaults() {
	if c.MCPSessionIdle == 0 {
		c.MCPSessionIdle = time.Minute
	}
	if c.MaxJSONBody == 0 {
		c.MaxJSONBody = 1 << 20
	}
	if c.MaxFileSize == 0 {
		c.MaxFileSize = 5 << 30
	}
	if c.ExecOutputLimit == 0 {
		c.ExecOutputLimit = 1 << 20
	}
	if c.MaxExecTimeout == 0 {
		c.MaxExecTimeout = time.Hour
	}
	if c.WakeTimeout == 0 {
		c.WakeTimeout = 60 * time.Second
	}
}

// Server serves the REST API.
type Server struct {
	cfg     Config
	store   Store
	life    *lifecycle.Manager
	pods    Pods
	log     *slog.Logger
	now     func() time.Time
	reg     *prometheus.Registry
	ready   func() bool
	metrics *httpMetrics

	previewChanged func(ctx context.Context, inv edgeapi.Invalidation) error
	activity       Activity
	tickets        Tickets
	ticketKey      []byte
	hooks          Webhooks
	conns          *connlog.Recorder

	// streams are the open streams, ended when their authority goes or
	// their token expires.
	streams *authority.Registry[*liveStream]

	// stopStreams is closed by StopStreams to end event streams.
	stopStreams     chan struct{}
	stopStreamsOnce sync.Once

	// mcpExecs holds the commands /mcp's calls left running; StopStreams
	// ends them.
	mcpExecs *mcpserver.Execs
	// mcpSessions groups /mcp requests into sessions for the connection
	// log; RunMCPSessions ends the idle ones.
	mcpSessions *mcpSessions
}

// Deps are the Server's collaborators.
type Deps struct {
	Store     Store
	Lifecycle *lifecycle.Manager
	Pods      Pods
	Logger    *slog.Logger
	Registry  *prometheus.Registry
	// Ready reports whether every part of the process is up (readyz).
	Ready func() bool
	Now   func() time.Time
	// PreviewChanged is told of a preview host whose port was changed or
	// removed, so edges drop it from their caches and end the connections
	// it no longer admits; nil when no edge listens.
	PreviewChanged func(ctx context.Context, inv edgeapi.Invalidation) error
	// Activity is told about exec and files calls, which keep a sandbox
	// from being suspended; nil records nothing.
	Activity Activity
	// Tickets records redeemed terminal stream tickets, shared by every
	// replica; nil keeps them in this process (sbx dev).
	Tickets Tickets
	// TicketKey seals stream tickets; replicas must share it. Nil makes a
	// random key for this process.
	TicketKey []byte
	// Webhooks registers and reports webhooks; nil answers their routes
	// with 404.
	Webhooks Webhooks
	// Connections records the terminal and exec streams in the
	// connection log; nil records nothing.
	Connections *connlog.Recorder
}

// New builds the API server.
func New(cfg Config, d Deps) *Server {
	cfg.setDefaults()
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Ready == nil {
		d.Ready = func() bool { return true }
	}
	if d.Registry == nil {
		d.Registry = prometheus.NewRegistry()
	}
	if d.Tickets == nil {
		d.Tickets = nonces.NewMemory(d.Now)
	}
	if len(d.TicketKey) == 0 {
		d.TicketKey = make([]byte, 32)
		_, _ = rand.Read(d.TicketKey)
	}
	s := &Server{
		cfg: cfg, store: d.Store, life: d.Lifecycle, pods: d.Pods, log: d.Logger,
		now: d.Now, reg: d.Registry, ready: d.Ready, metrics: newHTTPMetrics(d.Registry),
		previewChanged: d.PreviewChanged, activity: d.Activity, stopStreams: make(chan struct{}),
		streams: authority.New[*liveStream](d.Now),
		tickets: d.Tickets, ticketKey: d.TicketKey, hooks: d.Webhooks, conns: d.Connections,
		mcpExecs: mcpserver.NewExecs(mcpserver.ExecsConfig{Bound: cfg.MCPExecBound, MaxOutput: cfg.ExecOutputLimit}),
	}
	s.mcpSessions = newMCPSessions(s, cfg.MCPSessionIdle)
	return s
}

// allowProbe are the methods a 405's Allow header may name.
var allowProbe = []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut,
	http.MethodPatch, http.MethodDelete, http.MethodOptions}

// Handler returns the routed handler.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.requestLogger, s.recoverer, s.metrics.middleware)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, r, errRouteNotFound)
	})
	var allowed *chi.Mux // built below, once every route is in r
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// RFC 9110 (15.5.6) requires Allow on a 405; chi adds it only in
		// its own 405 handler.
		path := cmp.Or(req.URL.RawPath, req.URL.Path)
		var ms []string
		for _, m := range allowProbe {
			if allowed.Match(chi.NewRouteContext(), m, path) {
				ms = append(ms, m)
			}
		}
		w.Header().Set("Allow", strings.Join(ms, ", "))
		writeError(w, req, errMethodNotAllowed)
	})

	r.Get("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	r.Get("/readyz", s.readyz)
	// No /metrics here: metrics name accounts, and are served on a
	// listener of their own (control.Config.MetricsAddr).
	// Introspection is authenticated by the grant token it checks; see
	// grants.go.
	r.Post("/api/v1/grants/introspect", s.introspect)
	r.Get("/api/v1/openapi.json", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(openAPIDoc)
	})

	// The terminal stream authenticates by bearer token or by ticket.
	r.Get("/api/v1/sandboxes/{id}/exec/stream", s.execStreamAuth)
	// MCP over Streamable HTTP; its tool calls come back in through r.
	r.Method(http.MethodPost, "/mcp", s.mcpEndpoint(r))

	r.Group(func(r chi.Router) {
		r.Use(s.authenticate, oneValueEach)
		r.Post("/api/v1/sandboxes", s.createSandbox)
		r.Get("/api/v1/sandboxes", s.listSandboxes)
		r.Put("/api/v1/sandboxes/by-name/{name}", s.ensureSandbox)
		r.Route("/api/v1/sandboxes/{id}", func(r chi.Router) {
			r.Use(s.resolveName)
			r.Get("/", exactPath(s.getSandbox))
			r.Patch("/", exactPath(s.patchSandbox))
			r.Delete("/", exactPath(s.deleteSandbox))
			r.Post("/suspend", s.suspendSandbox)
			r.Post("/resume", s.resumeSandbox)
			r.Post("/snapshots", s.createSnapshot)
			r.Get("/snapshots", s.listSandboxSnapshots)
			r.Post("/restore", s.restoreSandbox)
			r.Post("/recreate", s.recreateSandbox)
			r.Post("/exec", s.exec)
			r.Post("/exec/stream/tickets", s.createStreamTicket)
			r.Get("/files/*", s.getFile)
			r.Put("/files/*", s.putFile)
			r.Delete("/files/*", s.deleteFile)
			r.Post("/ssh_tokens", s.createSSHToken)
			r.Post("/ports", s.createPort)
			r.Get("/ports", s.listPorts)
			r.Delete("/ports/{port}", s.deletePort)
			r.Post("/ports/{port}/shares", s.createShare)
			r.Get("/ports/{port}/shares", s.listShares)
			r.Delete("/ports/{port}/shares/{share_id}", s.deleteShare)
			r.Get("/services", s.listServices)
			r.Put("/services/{name}", s.putService)
			r.Get("/services/{name}", s.getService)
			r.Delete("/services/{name}", s.deleteService)
			r.Get("/services/{name}/logs", s.serviceLogs)
			r.Get("/events", s.events)
			r.Get("/usage", s.sandboxUsage)
			r.Get("/connections", s.listSandboxConnections)
			r.Get("/egress", s.egressLog)
		})
		r.Get("/api/v1/snapshots", s.listSnapshots)
		r.Get("/api/v1/snapshots/{snap}", s.getSnapshot)
		r.Delete("/api/v1/snapshots/{snap}", s.deleteSnapshot)
		r.Post("/api/v1/webhooks", s.createWebhook)
		r.Get("/api/v1/webhooks", s.listWebhooks)
		r.Delete("/api/v1/webhooks/{id}", s.deleteWebhook)
		r.Get("/api/v1/webhooks/{id}/deliveries", s.listDeliveries)
		r.Post("/api/v1/webhooks/{id}/deliveries/{delivery_id}/redeliver", s.redeliver)
		r.Get("/api/v1/connections", s.listAccountConnections)
		r.Get("/api/v1/usage", s.usage)
		r.Get("/api/v1/profiles", s.listProfiles)
		r.Get("/api/v1/secrets", s.listSecrets)
		r.Post("/api/v1/secrets", s.putSecret)
		r.Delete("/api/v1/secrets/{name}", s.deleteSecret)
		r.Post("/api/v1/credentials", s.putCredential)
		r.Get("/api/v1/credentials", s.listCredentials)
		r.Delete("/api/v1/credentials/{name}", s.deleteCredential)
		r.Get("/api/v1/projects/{id}/audit", s.projectAudit)
	})
	allowed = flatRoutes(r)
	return r
}

// flatRoutes copies r's routes, subrouters' included, into one router
// without subrouters, for asking which methods a path takes: chi's Match
// answers yes to any method of a path under a subrouter (it returns the
// mount's pattern when the subrouter has no route for the method).
func flatRoutes(r chi.Routes) *chi.Mux {
	flat := chi.NewRouter()
	noop := func(http.ResponseWriter, *http.Request) {}
	_ = chi.Walk(r, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		flat.MethodFunc(method, route, noop)
		// A subrouter's "/" route is served at the mount's own path too.
		if trimmed := strings.TrimSuffix(route, "/"); trimmed != route && trimmed != "" {
			flat.MethodFunc(method, trimmed, noop)
		}
		return nil
	})
	return flat
}

// oneValueEach refuses a query parameter given more than once. Every
// parameter of the API but label (a list filter, repeated to require
// several labels) takes one value, and net/url keeps them all while
// the handlers read the first: ?status=ready&status=suspended listed the
// ready ones only, as if the second were not there.
func oneValueEach(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range r.URL.Query() {
			if len(vs) > 1 && k != "label" {
				writeProblem(w, r, badQuery(k, "is given more than once; it takes one value"))
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

// exactPath serves the sandbox's own routes at /api/v1/sandboxes/{id}
// only, not with a trailing slash, which chi's subrouter would also give
// them. .../{id}/ is where a client's ".../services/.." or
// ".../files/.." lands once its URL library removes the dot segments: a
// DELETE of a service or a file must never become one of the sandbox.
func exactPath(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/") {
			writeError(w, r, errRouteNotFound)
			return
		}
		h(w, r)
	}
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if !s.ready() {
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "starting\n")
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}

// requestLogger gives every request the server's logger, so an error
// answered before authentication (the token lookup failing, say) is
// logged where the rest is, not through slog's process default.
func (s *Server) requestLogger(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log := s.log.With("request_id", middleware.GetReqID(r.Context()))
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), loggerKey, log)))
	})
}

// recoverer turns a handler panic into a 500 problem and a log line with
// the stack, instead of killing the connection with no answer.
func (s *Server) recoverer(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.ErrorContext(r.Context(), "handler panic", "panic", v, "path", r.URL.Path,
					"stack", string(stack()))
				writeError(w, r, errInternal)
			}
		}()
		next.ServeHTTP(w, r)
	})
}
