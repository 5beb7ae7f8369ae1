package metricdef_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
)

func TestNames(t *testing.T) {
	t.Parallel()
	sub := metricdef.Subsystem("demo")
	tests := []struct {
		name string
		c    prometheus.Collector
		fq   string
		help string
		vars string
	}{
		{"Counter", sub.Counter("a_total", "help a"), "sbx_demo_a_total", "help a", ""},
		{"CounterVec", sub.CounterVec("b_total", "help b", "x", "y"), "sbx_demo_b_total", "help b", "x,y"},
		{"Gauge", sub.Gauge("c", "help c"), "sbx_demo_c", "help c", ""},
		{"GaugeVec", sub.GaugeVec("d", "help d", "z"), "sbx_demo_d", "help d", "z"},
		{"Histogram", sub.Histogram("e_seconds", "help e", []float64{1, 2}), "sbx_demo_e_seconds", "help e", ""},
		{"HistogramVec", sub.HistogramVec("f_seconds", "help f", []float64{1}, "k"), "sbx_demo_f_seconds", "help f", "k"},
		{"no subsystem", metricdef.Subsystem("").Counter("g_total", "help g"), "sbx_g_total", "help g", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ch := make(chan *prometheus.Desc, 1)
			tc.c.Describe(ch)
			got := (<-ch).String()
			for _, want := range []string{
				`fqName: "` + tc.fq + `"`, `help: "` + tc.help + `"`, `variableLabels: {` + tc.vars + `}`,
			} {
				if !strings.Contains(got, want) {
					t.Errorf("Desc = %s, want it to hold %s", got, want)
				}
			}
		})
	}
}

// TestBuckets checks a histogram keeps the buckets it was given.
func TestBuckets(t *testing.T) {
	t.Parallel()
	h := metricdef.Subsystem("demo").Histogram("g_seconds", "help g", []float64{0.5, 2})
	h.Observe(1)
	reg := prometheus.NewRegistry()
	reg.MustRegister(h)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var got []float64
	for _, b := range mfs[0].GetMetric()[0].GetHistogram().GetBucket() {
		got = append(got, b.GetUpperBound())
	}
	if len(got) != 2 || got[0] != 0.5 || got[1] != 2 {
		t.Errorf("buckets = %v, want [0.5 2]", got)
	}
}
