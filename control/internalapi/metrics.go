package internalapi

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus"
)

// metrics counts answered requests by route and status, so an operator
// (and a test) sees which edge questions reach control and how they end.
type metrics struct {
	requests *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{requests: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sbx_internal_api_requests_total",
		Help: "Internal API requests answered, by route pattern and HTTP status.",
	}, []string{"path", "status"})}
	if reg != nil {
		reg.MustRegister(m.requests)
	}
	return m
}

// count is middleware: the label is chi's route pattern (a fixed set), or
// "unmatched", never the raw path a caller chose.
func (m *metrics) count(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		path := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			path = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		m.requests.WithLabelValues(path, strconv.Itoa(status)).Inc()
	})
}
