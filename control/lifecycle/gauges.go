package lifecycle

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/control/store"
)

// MonthMinutes is the account's compute minutes in the current calendar
// month (UTC), an open session counting up to now: what the monthly soft
// cap is compared with.
func (m *Manager) MonthMinutes(ctx context.Context, accountID string) (float64, error) {
	now := m.now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	rows, err := m.store.Usage(ctx, accountID, from, now, now)
	if err != nil {
		return 0, fmt.Errorf("month minutes of %s: %w", accountID, err)
	}
	secs := 0.0
	for _, r := range rows {
		if r.Kind == store.SessionCompute {
			secs += r.Seconds
		}
	}
	return secs / 60, nil
}

// gaugeTimeout bounds the queries one scrape runs.
const gaugeTimeout = 5 * time.Second

// Gauges exports state read from the store at scrape time: sandboxes per
// account, platform and state, and each capped account's month minutes
// against its soft cap. Reading at scrape time keeps every replica's
// answer the same without a background loop; the queries are grouped
// counts over indexed columns.
type Gauges struct {
	m   *Manager
	log *slog.Logger

	sandboxes *prometheus.Desc
	minutes   *prometheus.Desc
	softCap   *prometheus.Desc
	overCap   *prometheus.Desc
}

// NewGauges returns the collector; register it on the metrics registry.
func (m *Manager) NewGauges() *Gauges {
	return &Gauges{
		m: m, log: m.log,
		sandboxes: prometheus.NewDesc("sbx_sandboxes",
			"Sandboxes holding (or about to hold) resources, by account, platform and state.",
			[]string{"account", "platform", "state"}, nil),
		minutes: prometheus.NewDesc("sbx_account_month_compute_minutes",
			"Compute minutes this calendar month (UTC) of accounts with a monthly soft cap.",
			[]string{"account"}, nil),
		softCap: prometheus.NewDesc("sbx_account_monthly_minutes_soft_cap",
			"The account's monthly minutes soft cap (it blocks nothing).", []string{"account"}, nil),
		overCap: prometheus.NewDesc("sbx_account_over_soft_cap",
			"1 when the account's month compute minutes exceed its soft cap.", []string{"account"}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *Gauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.sandboxes
	ch <- g.minutes
	ch <- g.softCap
	ch <- g.overCap
}

// Collect implements prometheus.Collector. A failed query drops its
// series from this scrape and is logged; the scrape itself succeeds.
func (g *Gauges) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), gaugeTimeout)
	defer cancel()
	counts, err := g.m.store.LiveCounts(ctx)
	if err != nil {
		g.log.Warn("metrics: live counts", "err", err)
	}
	for _, c := range counts {
		ch <- prometheus.MustNewConstMetric(g.sandboxes, prometheus.GaugeValue, float64(c.Count), c.AccountID, c.Platform, string(c.State))
	}
	accts, err := g.m.store.Accounts(ctx)
	if err != nil {
		g.log.Warn("metrics: accounts", "err", err)
		return
	}
	for _, a := range accts {
		if a.MonthlyMinutes <= 0 {
			continue
		}
		used, err := g.m.MonthMinutes(ctx, a.ID)
		if err != nil {
			g.log.Warn("metrics: month minutes", "account_id", a.ID, "err", err)
			continue
		}
		over := 0.0
		if used > float64(a.MonthlyMinutes) {
			over = 1
		}
		ch <- prometheus.MustNewConstMetric(g.minutes, prometheus.GaugeValue, used, a.ID)
		ch <- prometheus.MustNewConstMetric(g.softCap, prometheus.GaugeValue, float64(a.MonthlyMinutes), a.ID)
		ch <- prometheus.MustNewConstMetric(g.overCap, prometheus.GaugeValue, over, a.ID)
	}
}
