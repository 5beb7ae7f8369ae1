package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
)

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	exec     *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	api := metricdef.Subsystem("api")
	m := &httpMetrics{
		requests: api.CounterVec("requests_total", "API requests by route pattern, method and status code.", "route", "method", "code"),
		duration: api.HistogramVec("request_seconds", "API request latency by route pattern.", prometheus.DefBuckets, "route"),
		// account is the account's ID from the store, never client
		// input: series grow with accounts (the spec asks for exec
		// duration per account and platform), not with requests.
		exec: metricdef.Subsystem("").HistogramVec("exec_seconds", "Duration of exec calls inside sandboxes, by account and platform.",
			[]float64{0.01, 0.05, 0.1, 0.5, 1, 5, 30, 120, 600, 3600}, "account", "platform"),
	}
	reg.MustRegister(m.requests, m.duration, m.exec)
	return m
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach Flush on the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// middleware labels by route pattern, never by raw path, so cardinality
// stays bounded whatever clients send.
func (m *httpMetrics) middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		if rec.code == 0 {
			rec.code = http.StatusOK
		}
		m.requests.WithLabelValues(route, r.Method, strconv.Itoa(rec.code)).Inc()
		m.duration.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}
