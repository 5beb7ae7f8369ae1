package sshbroker

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	handshakes      *prometheus.CounterVec
	authFailures    *prometheus.CounterVec
	conns           prometheus.Gauge
	channels        *prometheus.GaugeVec
	channelsRefused *prometheus.CounterVec
	bytes           *prometheus.CounterVec
	dial            prometheus.Histogram
	authCache       *prometheus.CounterVec
	wakes           prometheus.Histogram

	bytesToSandbox   prometheus.Counter
	bytesFromSandbox prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "handshakes_total",
			Help: "Client connections by outcome of key exchange, auth and upstream dial.",
		}, []string{"result"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "auth_failures_total",
			Help: "Refused authentication attempts by reason.",
		}, []string{"reason"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "connections_open",
			Help: "Authenticated client connections currently relayed.",
		}),
		channels: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "channels_open",
			Help: "Relayed channels currently open, by channel type.",
		}, []string{"type"}),
		channelsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "channels_refused_total",
			Help: "Channel opens refused by the broker, by reason.",
		}, []string{"reason"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "relayed_bytes_total",
			Help: "Channel payload bytes relayed, by direction.",
		}, []string{"direction"}),
		dial: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "upstream_dial_seconds",
			Help:    "Time to connect and authenticate to a sandbox sshd.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
		}),
		authCache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "auth_cache_total",
			Help: "Authorizer lookups answered from the cache (hit) or not (miss).",
		}, []string{"result"}),
		wakes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sbx", Subsystem: "sshbroker", Name: "wake_wait_seconds",
			Help:    "Time connections waited for a suspended sandbox to wake.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
	}
	m.bytesToSandbox = m.bytes.WithLabelValues("to_sandbox")
	m.bytesFromSandbox = m.bytes.WithLabelValues("from_sandbox")
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.handshakes, m.authFailures, m.conns, m.channels, m.channelsRefused, m.bytes, m.dial, m.authCache, m.wakes} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register sshbroker metrics: %w", err)
		}
	}
	return m, nil
}

// reasonLabel maps a refusal to a bounded label value.
func reasonLabel(err error) string {
	switch {
	case errors.Is(err, ErrUnknownKey):
		return "unknown_key"
	case errors.Is(err, ErrExpired):
		return "expired"
	case errors.Is(err, ErrSandboxEnded):
		return "sandbox_ended"
	case errors.Is(err, ErrWrongSandbox):
		return "wrong_sandbox"
	case errors.Is(err, ErrUnknownSandbox):
		return "unknown_sandbox"
	case errors.Is(err, ErrNotReady):
		return "not_ready"
	case errors.Is(err, errBadUsername):
		return "bad_username"
	case errors.Is(err, errTooManyConns):
		return "sandbox_conn_limit"
	case errors.Is(err, errUpstream):
		return "upstream"
	case errors.Is(err, errMethod):
		return "method"
	case errors.Is(err, errRateLimited):
		return "rate_limited"
	default:
		return "internal"
	}
}
