package k8s

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/sbxedge/sbx/internal/metricdef"
)

// Metrics are the provider's Prometheus series. The pool gauges are the
// capacity signal: deploy/'s recording rules turn claimed, queued and the
// warm floor into the spec's desired slots (with the hour's p95) and alert
// when it stays above capacity.
type Metrics struct {
	provisions    *prometheus.CounterVec
	stops         *prometheus.CounterVec
	warmClaims    *prometheus.CounterVec
	capacity      *prometheus.GaugeVec
	desired       *prometheus.GaugeVec
	available     *prometheus.GaugeVec
	unschedulable *prometheus.GaugeVec
	claimed       *prometheus.GaugeVec
	queued        *prometheus.GaugeVec
	warmFloor     *prometheus.GaugeVec
	perHost       *prometheus.GaugeVec
}

// NewMetrics registers the series on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	k8s, pool := metricdef.Subsystem("k8s"), metricdef.Subsystem("pool")
	m := &Metrics{
		provisions:    k8s.CounterVec("provisions_total", "Sandbox pods brought up, by profile and boot (warm_hit, cold_boot).", "profile", "boot"),
		stops:         k8s.CounterVec("pod_stops_total", "Sandbox pods seen ending on their own, by reason.", "reason"),
		warmClaims:    k8s.CounterVec("warm_claims_total", "Warm pool claim attempts, by profile and result (hit, miss).", "profile", "result"),
		capacity:      pool.GaugeVec("slots_capacity", "Sandbox slots the pool's hosts hold (catalog slots).", "pool"),
		desired:       pool.GaugeVec("slots_desired", "Slots wanted: live sandbox pods plus the warm replica floor.", "pool"),
		available:     pool.GaugeVec("slots_available", "Capacity minus pods holding a slot (sandbox and warm).", "pool"),
		unschedulable: pool.GaugeVec("pods_unschedulable", "Pods the scheduler found no host for (NoAvailableHost).", "pool"),
		claimed:       pool.GaugeVec("slots_claimed", "Live sandbox pods placed on a host.", "pool"),
		queued:        pool.GaugeVec("slots_queued", "Live sandbox pods waiting for a host (not yet scheduled).", "pool"),
		warmFloor:     pool.GaugeVec("warm_floor", "Warm pods the pool's profiles keep (the sum of their warmReplicas).", "pool"),
		perHost:       pool.GaugeVec("slots_per_host", "Sandbox pods one host of the pool holds (2 for macOS: Apple's licence).", "pool"),
	}
	if reg != nil {
		reg.MustRegister(m.provisions, m.stops, m.warmClaims, m.capacity, m.desired, m.available, m.unschedulable,
			m.claimed, m.queued, m.warmFloor, m.perHost)
	}
	return m
}

// poolUsage is one pool's slot accounting at one instant.
type poolUsage struct {
	Capacity, Desired, Available, Unschedulable int
	// Claimed and Queued split the live sandbox pods into those placed on
	// a host and those still waiting for one; WarmFloor is the warm pods
	// the profiles ask for, PerHost one host's slots.
	Claimed, Queued, WarmFloor, PerHost int
}

// usage computes every pool's slots from the pods in the cache.
func (p *Provider) usage(pods []*corev1.Pod) map[string]poolUsage {
	out := map[string]poolUsage{}
	for name, pool := range p.cfg.Catalog.Pools {
		u := poolUsage{Capacity: pool.Slots, PerHost: pool.HostSlots(name)}
		for _, s := range p.cfg.Catalog.Profiles {
			if s.Platform == name {
				u.WarmFloor += s.WarmReplicas
			}
		}
		u.Desired = u.WarmFloor
		u.Available = u.Capacity
		out[name] = u
	}
	for _, pod := range pods {
		u, ok := out[pod.Labels[LabelPlatform]]
		if !ok || terminal(pod) || pod.DeletionTimestamp != nil {
			continue
		}
		u.Available--
		sandbox := pod.Labels[LabelRole] == RoleSandbox
		if sandbox {
			u.Desired++
			if placed(pod) {
				u.Claimed++
			} else {
				u.Queued++
			}
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

// placed reports whether the scheduler has given pod a host.
func placed(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return true
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
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
				p.metrics.claimed.WithLabelValues(pool).Set(float64(u.Claimed))
				p.metrics.queued.WithLabelValues(pool).Set(float64(u.Queued))
				p.metrics.warmFloor.WithLabelValues(pool).Set(float64(u.WarmFloor))
				p.metrics.perHost.WithLabelValues(pool).Set(float64(u.PerHost))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
