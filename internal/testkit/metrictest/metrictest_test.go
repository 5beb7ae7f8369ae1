package metrictest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/testkit/metrictest"
)

func TestSeries(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	jobs := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "jobs_total", Help: "h"}, []string{"kind", "result"})
	lat := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "lat_seconds", Help: "h", Buckets: []float64{1}})
	reg.MustRegister(jobs, lat)
	jobs.WithLabelValues("provision", "ok").Add(2)
	jobs.WithLabelValues("provision", "error").Add(3)
	jobs.WithLabelValues("terminate", "ok").Add(5)
	lat.Observe(0.5)
	lat.Observe(1.5)

	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"both labels", metrictest.Series(t, reg, "jobs_total", "kind", "provision", "result", "error").GetCounter().GetValue(), 3},
		{"one label", metrictest.Series(t, reg, "jobs_total", "kind", "terminate").GetCounter().GetValue(), 5},
		{"no labels: first series", metrictest.Series(t, reg, "jobs_total").GetCounter().GetValue(), 3},
		{"no such label value", metrictest.Series(t, reg, "jobs_total", "kind", "suspend").GetCounter().GetValue(), 0},
		{"no such family", metrictest.Series(t, reg, "missing_total").GetCounter().GetValue(), 0},
		{"histogram sum", metrictest.Series(t, reg, "lat_seconds").GetHistogram().GetSampleSum(), 2},
		{"histogram count", float64(metrictest.Series(t, reg, "lat_seconds").GetHistogram().GetSampleCount()), 2},
	}
	for _, tc := range tests {
		if tc.got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if m := metrictest.Series(t, reg, "jobs_total", "kind", "suspend"); m != nil {
		t.Errorf("unmatched labels gave %v, want nil", m)
	}
}

func TestLines(t *testing.T) {
	t.Parallel()
	page := "# HELP a_total a\na_total 1\nb_total{x=\"y\"} 2\na_total_created 3\n"
	if got, want := metrictest.Lines(page, "a_total"), "# HELP a_total a\na_total 1\na_total_created 3"; got != want {
		t.Errorf("Lines = %q, want %q", got, want)
	}
	if got := metrictest.Lines(page, "c_total"); got != "" {
		t.Errorf("Lines with no match = %q, want empty", got)
	}
}
