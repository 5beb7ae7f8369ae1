package main

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// sample is one line of a /metrics scrape: a series' labels and value.
type sample struct {
	labels map[string]string
	value  float64
}

// scrape reads the samples of family from the dev stack's metrics
// listener (control's registry, which the in-process edge shares).
func (p *devProc) scrape(t *testing.T, family string) []sample {
	t.Helper()
	resp, err := http.Get(p.Metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sample
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), family)
		if !ok {
			continue
		}
		s := sample{labels: map[string]string{}}
		switch {
		case strings.HasPrefix(rest, "{"):
			labels, value, _ := strings.Cut(rest[1:], "} ")
			for _, kv := range strings.Split(labels, ",") {
				k, v, _ := strings.Cut(kv, "=")
				s.labels[k] = strings.Trim(v, `"`)
			}
			rest = value
		case strings.HasPrefix(rest, " "):
			rest = rest[1:]
		default:
			continue // another family whose name starts with this one's
		}
		if s.value, err = strconv.ParseFloat(rest, 64); err != nil {
			t.Fatalf("metric line %q: %v", sc.Text(), err)
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("scrape metrics: %v", err)
	}
	return out
}

// scrapeSums sums family's samples by key(labels).
func (p *devProc) scrapeSums(t *testing.T, family string, key func(labels map[string]string) string) map[string]float64 {
	t.Helper()
	sums := map[string]float64{}
	for _, s := range p.scrape(t, family) {
		sums[key(s.labels)] += s.value
	}
	return sums
}
