package netlimitprom_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sbxedge/sbx/internal/netlimit"
	"github.com/sbxedge/sbx/internal/netlimit/netlimitprom"
)

// TestSharedRegistry: control and the edge of sbx dev both ask for the
// series on one registry; the second gets the first's, not a panic or an
// error, and both count into them.
func TestSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := netlimitprom.For(reg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := netlimitprom.For(reg)
	if err != nil {
		t.Fatalf("second For on one registry: %v", err)
	}
	a.Config(netlimit.Config{Name: "API"}).AcceptErrors.Inc()
	b.Config(netlimit.Config{Name: "API"}).AcceptErrors.Inc()
	b.Config(netlimit.Config{Name: "previews"}).Open.Inc()
	if got := sum(t, reg, "sbx_listener_accept_errors_total"); got != 2 {
		t.Errorf("accept errors: %v, want 2", got)
	}
	if n, err := testutil.GatherAndCount(reg, "sbx_listener_open_connections"); err != nil || n != 2 {
		t.Errorf("open connections: %d series (%v), want 2, one per listener named", n, err)
	}
}

// sum adds up every series of the counter name in reg.
func sum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}
