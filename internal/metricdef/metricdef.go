// Package metricdef defines sbx's Prometheus collectors: each is a name,
// a help line and its labels under the "sbx" namespace and the subsystem
// that records it, so a package's metrics read as a list of what they
// count rather than as repeated option structs. It registers nothing; the
// caller decides where each collector goes.
package metricdef

import "github.com/prometheus/client_golang/prometheus"

// Subsystem names the part of sbx that records a metric: a collector
// called name is exported as sbx_<Subsystem>_<name>, or as sbx_<name>
// for the empty Subsystem (the lifecycle's and the API's series, named
// for what they count in the whole product).
type Subsystem string

// Counter is a counter without labels.
func (s Subsystem) Counter(name, help string) prometheus.Counter {
	return prometheus.NewCounter(prometheus.CounterOpts(s.opts(name, help)))
}

// CounterVec is a counter by labels.
func (s Subsystem) CounterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts(s.opts(name, help)), labels)
}

// Gauge is a gauge without labels.
func (s Subsystem) Gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts(s.opts(name, help)))
}

// GaugeVec is a gauge by labels.
func (s Subsystem) GaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts(s.opts(name, help)), labels)
}

// Histogram is a histogram without labels over buckets.
func (s Subsystem) Histogram(name, help string, buckets []float64) prometheus.Histogram {
	return prometheus.NewHistogram(s.histogramOpts(name, help, buckets))
}

// HistogramVec is a histogram by labels over buckets.
func (s Subsystem) HistogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(s.histogramOpts(name, help, buckets), labels)
}

func (s Subsystem) opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: "sbx", Subsystem: string(s), Name: name, Help: help}
}

func (s Subsystem) histogramOpts(name, help string, buckets []float64) prometheus.HistogramOpts {
	o := s.opts(name, help)
	return prometheus.HistogramOpts{
		Namespace: o.Namespace, Subsystem: o.Subsystem, Name: o.Name, Help: o.Help,
		Buckets: buckets,
	}
}
