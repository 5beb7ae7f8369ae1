package k8s

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
)

// Metrics are the provider's Prometheus series. The pool gauges are the
// capacity signal: deploy/ alerts when desired slots stay above capacity.
type Metrics struct {
	provisions    *prometheus.CounterVec
	stops         *prometheus.CounterVec
	warmClaims    *prometheus.CounterVec
	capacity      *prometheus.GaugeVec
	desired       *prometheus.GaugeVec
	available     *prometheus.GaugeVec
	unschedulable *prometheus.GaugeVec
}

// NewMetrics registers the series on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		provisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_k8s_provisions_total", Help: "Sandbox pods brought up, by profile and boot (warm_hit, cold_boot).",
		}, []string{"profile", "boot"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_k8s_pod_stops_total", Help: "Sandbox pods seen ending on their own, by reason.",
		}, []string{"reason"}),
		warmClaims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sbx_k8s_warm_claims_total", Help: "Warm pool claim attempts, by profile and result (hit, miss).",
		}, []string{"profile", "result"}),
		capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbx_pool_slots_capacity", Help: "Sandbox slots the pool's hosts hold (catalog slots).",
		}, []string{"pool"}),
		desired: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbx_pool_slots_desired", Help: "Slots wanted: live sandbox pods plus the warm replica floor.",
		}, []string{"pool"}),
		available: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbx_pool_slots_available", Help: "Capacity minus pods holding a slot (sandbox and warm).",
		}, []string{"pool"}),
		unschedulable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sbx_pool_pods_unschedulable", Help: "Pods the scheduler found no host for (NoAvailableHost).",
		}, []string{"pool"}),
	}
	if reg != nil {
		reg.MustRegister(m.provisions, m.stops, m.warmClaims, m.capacity, m.desired, m.available, m.unschedulable)
	}
	return m
}

// poolUsage is one pool's slot accounting at one instant.
type poolUsage struct {
	Capacity, Desired, Available, Unschedulable int
}

// usage computes every pool's slots from the pods in the cache.
func (p *Provider) usage(pods []*corev1.Pod) map[string]poolUsage {
	out := map[string]poolUsage{}
	for name, pool := range p.cfg.Catalog.Pools {
		u := poolUsage{Capacity: pool.Slots}
		for _, s := range p.cfg.Catalog.Profiles {
			if s.Platform == name {
				u.Desired += s.WarmReplicas
			}
		}
		u.Available = u.Capacity
		out[name] = u
	}
	for _, pod := range pods {
		u, ok := out[pod.Labels[LabelPlatform]]
		if !ok || terminal(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		u.Available--
		if pod.Labels[LabelRole] == RoleSandbox {
			u.Desired++
		}
		for _, c := range pod.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
				u.Unschedulable++
			}
		}
		out[pod.Labels[LabelPlatform]] = u
	}
	return out
}

// gauges refreshes the pool gauges from the informer cache every
// ReplenishInterval until ctx ends.
func (p *Provider) gauges(ctx context.Context, lister corelisters.PodLister) {
	t := time.NewTicker(p.cfg.ReplenishInterval)
	defer t.Stop()
	for {
		pods, err := lister.Pods(p.cfg.Namespace).List(labels.Everything())
		if err == nil {
			for pool, u := range p.usage(pods) {
				p.metrics.capacity.WithLabelValues(pool).Set(float64(u.Capacity))
				p.metrics.desired.WithLabelValues(pool).Set(float64(u.Desired))
				p.metrics.available.WithLabelValues(pool).Set(float64(u.Available))
				p.metrics.unschedulable.WithLabelValues(pool).Set(float64(u.Unschedulable))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
