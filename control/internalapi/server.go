// Package internalapi is control's internal HTTP API, /internal/v1, which
// only the edge calls. It is served on its own listener, never the public
// one, and every request must carry the shared secret as a bearer token.
//
// Adding an endpoint (see ssh.go for the model):
//  1. the path and body types in internal/edgeapi;
//  2. a dependency interface and a field in Deps, declared here where used;
//  3. a method func(ctx, Req) (Resp, error) on *Server, mounted in routes
//     with jsonEndpoint, which decodes, calls and encodes;
//  4. its refusals in toProblem (errors.go), the one error mapping;
//  5. a client method in edge/controlclient.
package internalapi

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/jsonbody"
)

// MinSecretLen is the shortest shared secret accepted: 32 bytes of
// randomness, base64- or hex-encoded, is well above it.
const MinSecretLen = 32

// maxBody bounds request bodies; every internal request is small.
const maxBody = 64 << 10

// Config configures the internal API.
type Config struct {
	// Secret is the shared bearer token the edge presents. At least
	// MinSecretLen bytes.
	Secret string
	// Logger receives request failures. Nil discards.
	Logger *slog.Logger
	// Registry receives the request counter; nil leaves it unregistered.
	Registry prometheus.Registerer
}

// Validate names the bad field. It has no side effects.
func (c *Config) Validate() error {
	if len(c.Secret) < MinSecretLen {
		return fmt.Errorf("internalapi config: Secret must be at least %d bytes", MinSecretLen)
	}
	return nil
}

// Deps are the endpoints' collaborators. A nil dependency leaves its
// endpoints unmounted (404), so a test can build a server with just the
// part it exercises.
type Deps struct {
	SSHAuth SSHAuthorizer
	Preview PreviewRoutes
	// PreviewMembers maps signed-in identities to accounts; nil admits
	// nobody.
	PreviewMembers Members
	// Waker wakes suspended sandboxes for the edge.
	Waker Waker
	// Egress checks the egress gateway's proxy credentials.
	Egress EgressAuthorizer
	// Connections stores the edge's connection log batches.
	Connections ConnectionLog
	// Shares redeems and checks preview share links.
	Shares Shares
	// EgressLog keeps the gateway's decisions.
	EgressLog EgressLog
	// Credentials opens credential routes.
	Credentials CredentialRoutes
}

// Server serves /internal/v1.
type Server struct {
	secretSum [sha256.Size]byte
	log       *slog.Logger
	deps      Deps
	metrics   *metrics
}

// New validates cfg and builds the server.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{secretSum: sha256.Sum256([]byte(cfg.Secret)), log: cfg.Logger, deps: deps, metrics: newMetrics(cfg.Registry)}, nil
}

// Handler returns the routed, authenticated handler.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.metrics.count, s.authenticate)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errRouteNotFound)
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		s.writeError(w, r, errMethodNotAllowed)
	})
	s.routes(r)
	return r
}

// routes mounts every endpoint whose dependency is present.
func (s *Server) routes(r chi.Router) {
	r.Get(edgeapi.PathHealth, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`+"\n")
	})
	if s.deps.SSHAuth != nil {
		r.Post(edgeapi.PathSSHAuthorize, jsonEndpoint(s, s.sshAuthorize))
	}
	if s.deps.Waker != nil {
		r.Post(edgeapi.PathWake, jsonEndpoint(s, s.wake))
	}
	if s.deps.Egress != nil {
		r.Post(edgeapi.PathEgressAuthorize, jsonEndpoint(s, s.egressAuthorize))
	}
	if s.deps.Connections != nil {
		r.Post(edgeapi.PathConnections, jsonEndpoint(s, s.reportConnections))
	}
	if s.deps.EgressLog != nil {
		r.Post(edgeapi.PathEgressLog, jsonEndpoint(s, s.egressLog))
	}
	if s.deps.Credentials != nil {
		r.Post(edgeapi.PathEgressCredential, jsonEndpoint(s, s.egressCredential))
	}
	if s.deps.Preview != nil {
		r.Post(edgeapi.PathPreviewRoute, jsonEndpoint(s, s.previewRoute))
		r.Post(edgeapi.PathPreviewToken, jsonEndpoint(s, s.previewToken))
		r.Post(edgeapi.PathPreviewMember, jsonEndpoint(s, s.previewMember))
	}
	if s.deps.Shares != nil {
		r.Post(edgeapi.PathPreviewShare, jsonEndpoint(s, s.previewShare))
	}
}

// authenticate admits only requests bearing the shared secret. Both sides
// are hashed before the constant-time compare so neither the secret's
// content nor its length leaks through timing.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		got := sha256.Sum256([]byte(tok))
		if !ok || subtle.ConstantTimeCompare(got[:], s.secretSum[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx-internal"`)
			s.writeError(w, r, errUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// jsonEndpoint adapts fn to HTTP: it decodes the JSON body into Req
// through jsonbody, as the public API does (unknown fields are allowed, so an edge one version ahead still works),
// calls fn, and encodes Resp with 200 or maps the error to a problem.
func jsonEndpoint[Req, Resp any](s *Server, fn func(context.Context, Req) (Resp, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Req
		data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err == nil {
			err = jsonbody.Decode(data, &req, jsonbody.Options{AllowUnknownFields: true})
		}
		if err != nil {
			s.writeError(w, r, badRequest(fmt.Sprintf("decode request body: %v", err)))
			return
		}
		resp, err := fn(r.Context(), req)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		if err := json.NewEncoder(w).Encode(resp); err != nil && !errors.Is(err, context.Canceled) {
			s.log.DebugContext(r.Context(), "write internal response", "path", r.URL.Path, "err", err)
		}
	}
}
