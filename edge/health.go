package edge

import (
	"io"
	"log/slog"
	"net/http"
	"time"
)

// openHealth binds the listener for /healthz and /readyz, for the
// orchestrator. Metrics have their own listener (Config.MetricsAddr).
func (e *Edge) openHealth(addr string) (*server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.ready.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	ln, err := e.listen(nil, addr, "health", smallMaxConns)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{
		Handler: mux,
		// Probes and scrapes are tiny and local; anything slow is broken.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(e.log.Handler(), slog.LevelDebug),
	}
	return &server{name: "health", ln: ln, serve: srv.Serve, closed: http.ErrServerClosed, shutdown: srv.Shutdown, close: srv.Close}, nil
}
