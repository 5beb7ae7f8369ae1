// Package metrictest reads one series out of a Prometheus registry, for
// tests that assert on what a component counted, and picks lines out of a
// scraped /metrics page for their failure messages.
package metrictest

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Series is the first series of the family name in g whose labels hold
// each name and value of labels, given in pairs ("kind", "provision");
// nil when g gathered none. Its getters are nil-safe, so
// Series(...).GetCounter().GetValue() is 0 for a series not (yet)
// exported. A failed Gather fails the test.
func Series(t testing.TB, g prometheus.Gatherer, name string, labels ...string) *dto.Metric {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metrictest.Series(%s): labels %q are not name/value pairs", name, labels)
	}
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabels(m, labels) {
				return m
			}
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, pairs []string) bool {
	for i := 0; i < len(pairs); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == pairs[i] && l.GetValue() == pairs[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Lines is the lines of a scraped /metrics page that hold substr, joined
// by newlines: the part of the page a failure message shows.
func Lines(page, substr string) string {
	var out []string
	for _, l := range strings.Split(page, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
