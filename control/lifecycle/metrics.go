package lifecycle

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/metricdef"
)

// sbx defines the lifecycle's series, which have no subsystem:
// sbx_<name>.
const sbx = metricdef.Subsystem("")

// Metrics are the lifecycle's Prometheus series.
type Metrics struct {
	created          *prometheus.CounterVec
	provisionSeconds *prometheus.HistogramVec
	failed           prometheus.Counter
	reaped           prometheus.Counter
	quotaRefusals    *prometheus.CounterVec
	grantMints       prometheus.Counter
	// jobRetries and jobFailures are keyed by job kind (jobKinds).
	jobRetries  *prometheus.CounterVec
	jobFailures *prometheus.CounterVec
	*idleMetrics
}

// Job kinds, the values of the kind label: the work lifecycle retries on
// its own. Restore is a leased attempt rather than a River job; it is
// counted the same way.
const (
	jobProvision = "provision"
	jobTerminate = "terminate"
	jobSuspend   = "suspend"
	jobRestore   = "restore"
)

var jobKinds = []string{jobProvision, jobTerminate, jobSuspend, jobRestore}

// NewMetrics registers the series on reg (nil: unregistered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		created: sbx.CounterVec("sandboxes_created_total", "Sandboxes admitted, by platform.", "platform"),
		// account is the account's ID, never client input: the series
		// grow with accounts, as the spec asks (per account and
		// platform), not with sandboxes or requests.
		provisionSeconds: sbx.HistogramVec("provision_seconds",
			"Time from provisioning start to ready, by account, platform and kind (warm_hit, cold_boot).",
			[]float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300}, "account", "platform", "kind"),
		failed: sbx.Counter("sandboxes_failed_total", "Sandboxes that failed to provision."),
		reaped: sbx.Counter("sandboxes_reaped_total", "Sandboxes ended by their deadline."),
		quotaRefusals: sbx.CounterVec("quota_refusals_total",
			"Creates and wakes refused by an account rule, by rule (feature_disabled, platform, concurrency).", "rule"),
		grantMints: sbx.Counter("grant_tokens_minted_total", "Grant tokens minted for sandboxes (one per grant)."),
		jobRetries: sbx.CounterVec("job_retries_total",
			"Failed attempts of lifecycle work that will be tried again, by kind (provision, terminate, restore).", "kind"),
		jobFailures: sbx.CounterVec("job_failures_total",
			"Lifecycle work given up on, by kind: provisioning that failed its sandbox, a teardown whose retries "+
				"ran out (its pod, volume or snapshot may be left), a suspend that returned the sandbox to ready, "+
				"a restore that failed its sandbox.", "kind"),
	}
	// Every kind exports 0 from the start, so increase() sees the first
	// failure rather than a series appearing.
	for _, k := range jobKinds {
		m.jobRetries.WithLabelValues(k)
		m.jobFailures.WithLabelValues(k)
	}
	m.idleMetrics = newIdleMetrics()
	if reg != nil {
		reg.MustRegister(m.created, m.provisionSeconds, m.failed, m.reaped, m.quotaRefusals, m.grantMints, m.jobRetries, m.jobFailures)
		m.idleMetrics.register(reg)
	}
	return m
}
