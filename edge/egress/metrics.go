package egress

import (
	"fmt"
	"net"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
)

// metrics are the gateway's collectors. No sandbox ID is a label: the
// per-sandbox story is the decision log.
type metrics struct {
	decisions *prometheus.CounterVec
	bytes     *prometheus.CounterVec
	open      prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	const sub = metricdef.Subsystem("egress")
	m := &metrics{
		decisions: sub.CounterVec("decisions_total", "Egress gateway requests by verdict (allowed, denied, failed, unauthenticated).", "verdict"),
		bytes:     sub.CounterVec("bytes_total", "Bytes relayed by the egress gateway, by direction (up: sandbox to destination).", "direction"),
		open:      sub.Gauge("open_connections", "Connections the egress gateway is relaying now."),
	}
	for _, v := range []Verdict{Allowed, Denied, Failed, Unauthenticated} {
		m.decisions.WithLabelValues(string(v))
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.decisions, m.bytes, m.open} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register egress metrics: %w", err)
		}
	}
	return m, nil
}

// countingConn counts the bytes the gateway writes to and reads from an
// upstream connection.
type countingConn struct {
	net.Conn
	read, written atomic.Int64
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.read.Add(int64(n))
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.written.Add(int64(n))
	return n, err
}

// CloseWrite half-closes when the connection can, so a tunnel passes on
// a client's end of input.
func (c *countingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
