// Package netlimitprom makes the Prometheus collectors a netlimit
// Listener reports to, labelled by listener name only.
package netlimitprom

import (
	"errors"
	"net"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
	"github.com/sbxedge/sbx/internal/netlimit"
)

const sub = metricdef.Subsystem("listener")

// Collectors are the listener series of one registry.
type Collectors struct {
	acceptErrors *prometheus.CounterVec
	open         *prometheus.GaugeVec
	full         *prometheus.CounterVec
}

// For registers the listener series on reg, or finds them there: control
// and the edge share one registry in sbx dev.
func For(reg prometheus.Registerer) (*Collectors, error) {
	c := &Collectors{
		acceptErrors: sub.CounterVec("accept_errors_total",
			"Temporary accept errors (out of file descriptors, and the like) survived by backing off.", "listener"),
		open: sub.GaugeVec("open_connections", "Connections open on the listener.", "listener"),
		full: sub.CounterVec("ceiling_waits_total",
			"Times the listener reached its connection ceiling and left new connections in the backlog.", "listener"),
	}
	var err error
	if c.acceptErrors, err = register(reg, c.acceptErrors); err != nil {
		return nil, err
	}
	if c.open, err = register(reg, c.open); err != nil {
		return nil, err
	}
	if c.full, err = register(reg, c.full); err != nil {
		return nil, err
	}
	return c, nil
}

func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, err
	}
	return c, nil
}

// Config is cfg with the series of listener cfg.Name filled in.
func (c *Collectors) Config(cfg netlimit.Config) netlimit.Config {
	cfg.AcceptErrors = c.acceptErrors.WithLabelValues(cfg.Name)
	cfg.Open = c.open.WithLabelValues(cfg.Name)
	cfg.Full = c.full.WithLabelValues(cfg.Name)
	return cfg
}

// Wrap is netlimit.Wrap with the series of listener cfg.Name.
func (c *Collectors) Wrap(ln net.Listener, cfg netlimit.Config) *netlimit.Listener {
	return netlimit.Wrap(ln, c.Config(cfg))
}
