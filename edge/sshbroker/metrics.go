package sshbroker

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
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
	sub := metricdef.Subsystem("sshbroker")
	m := &metrics{
		handshakes:      sub.CounterVec("handshakes_total", "Client connections by outcome of key exchange, auth and upstream dial.", "result"),
		authFailures:    sub.CounterVec("auth_failures_total", "Refused authentication attempts by reason.", "reason"),
		conns:           sub.Gauge("connections_open", "Authenticated client connections currently relayed."),
		channels:        sub.GaugeVec("channels_open", "Relayed channels currently open, by channel type.", "type"),
		channelsRefused: sub.CounterVec("channels_refused_total", "Channel opens refused by the broker, by reason.", "reason"),
		bytes:           sub.CounterVec("relayed_bytes_total", "Channel payload bytes relayed, by direction.", "direction"),
		dial: sub.Histogram("upstream_dial_seconds", "Time to connect and authenticate to a sandbox sshd.",
			prometheus.ExponentialBuckets(0.001, 2.5, 12)),
		authCache: sub.CounterVec("auth_cache_total", "Authorizer lookups answered from the cache (hit) or not (miss).", "result"),
		wakes: sub.Histogram("wake_wait_seconds", "Time connections waited for a suspended sandbox to wake.",
			prometheus.ExponentialBuckets(0.05, 2, 12)),
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

// reasonLabels are the bounded label values of refusals, first match wins.
var reasonLabels = []struct {
	err   error
	label string
}{
	{ErrUnknownKey, "unknown_key"},
	{ErrExpired, "expired"},
	{ErrSandboxEnded, "sandbox_ended"},
	{ErrWrongSandbox, "wrong_sandbox"},
	{ErrUnknownSandbox, "unknown_sandbox"},
	{ErrNotReady, "not_ready"},
	{errBadUsername, "bad_username"},
	{errTooManyConns, "sandbox_conn_limit"},
	{errUpstream, "upstream"},
	{errMethod, "method"},
	{errRateLimited, "rate_limited"},
}

// reasonLabel maps a refusal to a bounded label value.
func reasonLabel(err error) string {
	for _, r := range reasonLabels {
		if errors.Is(err, r.err) {
			return r.label
		}
	}
	return "internal"
}
