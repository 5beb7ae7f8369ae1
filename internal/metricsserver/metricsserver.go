// Package metricsserver serves Prometheus metrics on a listener of their
// own. Metrics name accounts and sandboxes and count what each does, so
// they never ride on a public API: control, the edge and sbx dev bind this
// listener to loopback by default, and a deployment opens it to its
// Prometheus only.
package metricsserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/netlimit"
)

// Server serves GET /metrics until Shutdown or Close; both wait for its
// goroutine and may be called more than once.
type Server struct {
	ln   net.Listener
	srv  *http.Server
	done chan error // the serving goroutine's result

	waitOnce sync.Once
	waitErr  error
}

// maxConns bounds the scrapers connected at once: a few Prometheus
// replicas, and someone's curl.
const maxConns = 64

// Listeners wraps a listener with its limits and metrics
// (netlimitprom.Collectors).
type Listeners interface {
	Wrap(net.Listener, netlimit.Config) *netlimit.Listener
}

// Start listens on addr and serves g's metrics there; lims, when not nil,
// counts the listener's connections and accept errors.
func Start(addr string, g prometheus.Gatherer, log *slog.Logger, lims Listeners) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for metrics on %s: %w", addr, err)
	}
	lcfg := netlimit.Config{Name: "metrics", MaxConns: maxConns, Logger: log}
	if lims != nil {
		ln = lims.Wrap(ln, lcfg)
	} else {
		ln = netlimit.Wrap(ln, lcfg)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	s := &Server{ln: ln, done: make(chan error, 1), srv: &http.Server{
		// A scrape has no body: one declared is refused and its
		// connection closed at once, not read for ReadTimeout.
		Handler: httplimit.BodyDeadline{Timeout: 5 * time.Second}.Wrap(mux),
		// A scrape is one small request from a nearby Prometheus; anything
		// slow is broken or hostile.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute, // scrape intervals run up to a minute
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() { s.done <- s.srv.Serve(ln) }()
	return s, nil
}

// Addr is where metrics are served.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Shutdown stops accepting scrapes, lets those in flight finish until ctx
// ends, and waits for the server to stop.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	return errors.Join(err, s.wait())
}

// Close stops the server at once and waits for it.
func (s *Server) Close() error {
	_ = s.srv.Close()
	return s.wait()
}

func (s *Server) wait() error {
	s.waitOnce.Do(func() {
		if err := <-s.done; !errors.Is(err, http.ErrServerClosed) {
			s.waitErr = fmt.Errorf("serve metrics: %w", err)
		}
	})
	return s.waitErr
}

// NewRegistry is a service's registry when its Config names none: the Go
// runtime's and the process's collectors, so every /metrics shows memory,
// goroutines and file descriptors beside the service's own series.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	// collectors.NewGoCollector and NewProcessCollector are these two calls
	// and nothing more (they silence the same warning), but their package
	// also holds the database/sql stats collector: it would link
	// database/sql into the edge, which has no database.
	//lint:ignore SA1019 the collectors package's wrappers call exactly these
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	return reg
}
