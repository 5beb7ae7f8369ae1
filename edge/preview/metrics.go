package preview

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
)

type metrics struct {
	requests *prometheus.CounterVec
	upstream prometheus.Histogram
	dial     prometheus.Histogram
	wsOpen   prometheus.Gauge
	bytesOut prometheus.Counter
	// relayed counts the requests each relay carried (lean and
	// reverseproxy, see relay.go).
	relayed                    *prometheus.CounterVec
	relayedLean, relayedRProxy prometheus.Counter
	// classes caches requests' counter of each status class (1xx to
	// 9xx), made on its first request: WithLabelValues costs a string,
	// a hash and a lock per request.
	classes [10]atomic.Pointer[prometheus.Counter]
}

// newMetrics registers on reg when it is non-nil. A second proxy on the
// same registry (tests, two replicas in one process) reuses the first's
// collectors.
func newMetrics(reg prometheus.Registerer) *metrics {
	sub := metricdef.Subsystem("preview")
	m := &metrics{
		requests: sub.CounterVec("requests_total", "Preview requests by response status class (2xx, 4xx, ...).", "class"),
		upstream: sub.Histogram("upstream_latency_seconds", "Time from forwarding a request to the sandbox's response headers.",
			prometheus.ExponentialBuckets(0.0005, 4, 10)),
		dial: sub.Histogram("upstream_dial_seconds", "Time to open a new upstream channel (pooled SSH connection plus direct-tcpip).",
			prometheus.ExponentialBuckets(0.0005, 4, 10)),
		wsOpen:   sub.Gauge("websockets_open", "Upgraded (WebSocket) connections currently relayed."),
		bytesOut: sub.Counter("response_bytes_total", "Response body bytes written to clients (upgraded connections excluded)."),
		relayed: sub.CounterVec("relayed_total",
			"Requests relayed to sandboxes, by path: lean (plain HTTP/1.x) or reverseproxy (WebSockets, HTTP/2, streamed bodies).", "path"),
	}
	if reg != nil {
		m.requests = register(reg, m.requests)
		m.upstream = register(reg, m.upstream)
		m.dial = register(reg, m.dial)
		m.wsOpen = register(reg, m.wsOpen)
		m.bytesOut = register(reg, m.bytesOut)
		m.relayed = register(reg, m.relayed)
	}
	m.relayedLean, m.relayedRProxy = m.relayed.WithLabelValues("lean"), m.relayed.WithLabelValues("reverseproxy")
	return m
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}

func (m *metrics) done(status int, n int64, _ time.Time) {
	m.class(status).Inc()
	m.bytesOut.Add(float64(n))
}

// class is requests' counter for status's class.
func (m *metrics) class(status int) prometheus.Counter {
	i := status / 100
	if i < 0 || i >= len(m.classes) {
		return m.requests.WithLabelValues(strconv.Itoa(i) + "xx")
	}
	if c := m.classes[i].Load(); c != nil {
		return *c
	}
	c := m.requests.WithLabelValues(strconv.Itoa(i) + "xx")
	m.classes[i].Store(&c)
	return c
}

// countingWriter records the status and body bytes. Unwrap lets
// http.ResponseController (which ReverseProxy uses to flush and to hijack
// for WebSocket upgrades) reach the real writer.
type countingWriter struct {
	http.ResponseWriter
	code int
	n    int64
}

func (c *countingWriter) WriteHeader(code int) {
	if c.code == 0 && code >= 200 || code == http.StatusSwitchingProtocols {
		c.code = code
	}
	c.ResponseWriter.WriteHeader(code)
}

func (c *countingWriter) Write(b []byte) (int, error) {
	if c.code == 0 {
		c.code = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

func (c *countingWriter) status() int {
	if c.code == 0 {
		return http.StatusOK
	}
	return c.code
}
