package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
)

// usageConfig is the usage scenario's flags.
type usageConfig struct {
	adminURL  string
	rows      int
	sandboxes int
	rounds    int
}

func (c *usageConfig) Validate() error {
	if c.rows < 1000 || c.rows > 5_000_000 || c.sandboxes < 1 || c.sandboxes > c.rows || c.rounds < 3 || c.rounds > 1000 {
		return errors.New("want 1000 <= -rows <= 5000000, 1 <= -sandboxes <= -rows, 3 <= -rounds <= 1000")
	}
	return nil
}

// usageBaseline is the usage query before the hourly rollup: one pass
// over every ledger row of the account in the window.
const usageBaseline = `SELECT platform, kind,
		sum(extract(epoch FROM least(coalesce(ended_at, $4), $3) - greatest(started_at, $2)))::float8
	FROM sandbox_sessions
	WHERE account_id = $1 AND started_at < $3 AND coalesce(ended_at, $4) > $2 AND coalesce(ended_at, $4) > started_at
	GROUP BY platform, kind ORDER BY platform, kind`

// runUsage fills a scratch database's ledger with one account's sessions
// (2.5 s apart over a month, 5 minutes each, the way a busy agent fleet
// bills) through the store's own open and close, so the rollup trigger
// sees every close, then times the store's usage query for this month
// against the one-pass query over the same rows.
func runUsage(ctx context.Context, args []string) error {
	c := usageConfig{}
	fs := flag.NewFlagSet("usage", flag.ContinueOnError)
	fs.StringVar(&c.adminURL, "admin-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a Postgres URL allowed to create and drop a scratch database")
	fs.IntVar(&c.rows, "rows", 1_000_000, "ledger rows of the account")
	fs.IntVar(&c.sandboxes, "sandboxes", 5_000, "sandboxes the rows belong to (each has one open line a kind at a time)")
	fs.IntVar(&c.rounds, "rounds", 15, "timed queries of each kind (medians and ranges are printed)")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	admin, err := pgx.Connect(ctx, c.adminURL)
	if err != nil {
		return fmt.Errorf("connect %s: %w", "admin database", err)
	}
	defer admin.Close(context.Background())
	db := fmt.Sprintf("sbx_loadtest_usage_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		return fmt.Errorf("create scratch database: %w", err)
	}
	defer func() { _, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)") }()
	cfg := admin.Config().Copy()
	cfg.Database = db
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, db)

	st, err := postgres.Open(ctx, url, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer st.Close()
	const acct = "acct-usage"
	base := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	err = st.InTx(ctx, func(tx store.Tx) error {
		if err := tx.UpsertAccount(ctx, store.Account{ID: acct, Name: acct, SandboxesEnabled: true, ConcurrentLimit: 10, CreatedAt: base}); err != nil {
			return err
		}
		for i := range c.sandboxes {
			plat := "linux"
			if i%10 == 0 {
				plat = "macos"
			}
			if err := tx.InsertSandbox(ctx, store.Sandbox{ID: fmt.Sprintf("sbx-u%06d", i), AccountID: acct, Profile: "small", Platform: plat,
				State: store.StateTerminated, CreatedAt: base, DeadlineAt: base.Add(time.Hour)}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("seed sandboxes: %w", err)
	}

	conn, err := pgx.ConnectConfig(ctx, func() *pgx.ConnConfig { cc := admin.Config().Copy(); cc.Database = db; return cc }())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	const step, length = 2500 * time.Millisecond, 5 * time.Minute
	fmt.Printf("filling the ledger: %d rows for one account (%d sandboxes, compute and storage lines)...\n", c.rows, c.sandboxes)
	fillStart := time.Now()
	perRound := 2 * c.sandboxes
	for n := 0; n < c.rows; n += perRound {
		k := min(perRound, c.rows-n)
		// Lines n..n+k start step apart; each round opens one line per
		// sandbox and kind and closes them, as lifecycle does.
		if _, err := conn.Exec(ctx, `WITH s AS (SELECT id, account_id, platform, row_number() OVER (ORDER BY id) - 1 AS rn FROM sandboxes)
			INSERT INTO sandbox_sessions (sandbox_id, account_id, platform, kind, started_at)
			SELECT s.id, s.account_id, s.platform, CASE WHEN g % 2 = 0 THEN 'compute' ELSE 'storage' END,
			       $2::timestamptz + ($3::bigint + g) * $4::interval
			FROM generate_series(0, $1::int - 1) AS g
			JOIN s ON s.rn = g / 2`,
			k, base, n, step.String()); err != nil {
			return fmt.Errorf("open lines: %w", err)
		}
		if _, err := conn.Exec(ctx, `UPDATE sandbox_sessions SET ended_at = started_at + $1::interval, end_reason = 'load'
			WHERE ended_at IS NULL`, length.String()); err != nil {
			return fmt.Errorf("close lines: %w", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for _, q := range []string{"VACUUM ANALYZE sandbox_sessions", "ANALYZE usage_hourly"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	fmt.Printf("filled in %v\n\n", time.Since(fillStart).Round(time.Second))

	now := base.Add(time.Duration(c.rows)*step + 17*time.Minute + 23*time.Second)
	from := base // this calendar month, the API's default window
	timeIt := func(q func() ([]store.UsageRow, error)) ([]time.Duration, []store.UsageRow, error) {
		var ds []time.Duration
		var rows []store.UsageRow
		for range c.rounds {
			t := time.Now()
			r, err := q()
			if err != nil {
				return nil, nil, err
			}
			ds, rows = append(ds, time.Since(t)), r
		}
		slices.Sort(ds)
		return ds, rows, nil
	}
	rollup, got, err := timeIt(func() ([]store.UsageRow, error) { return st.Usage(ctx, acct, from, now, now) })
	if err != nil {
		return err
	}
	onePass, want, err := timeIt(func() ([]store.UsageRow, error) {
		rs, err := conn.Query(ctx, usageBaseline, acct, from, now, now)
		if err != nil {
			return nil, err
		}
		return pgx.CollectRows(rs, func(r pgx.CollectableRow) (store.UsageRow, error) {
			var u store.UsageRow
			var kind string
			err := r.Scan(&u.Platform, &kind, &u.Seconds)
			u.Kind = store.SessionKind(kind)
			return u, err
		})
	})
	if err != nil {
		return err
	}
	if len(got) != len(want) {
		return fmt.Errorf("the rollup's usage %v differs from the ledger's %v", got, want)
	}
	for i := range got {
		if got[i].Platform != want[i].Platform || got[i].Kind != want[i].Kind || abs(got[i].Seconds-want[i].Seconds) > 1e-3 {
			return fmt.Errorf("the rollup's usage %v differs from the ledger's %v", got, want)
		}
	}
	med := func(ds []time.Duration) time.Duration { return ds[len(ds)/2] }
	fmt.Printf("usage of one account, %d ledger rows, window %s .. %s (%d rounds each)\n", c.rows, from.Format(time.RFC3339), now.Format(time.RFC3339), c.rounds)
	fmt.Printf("  %-28s median %9v  range %v .. %v\n", "store.Usage (hourly rollup)", med(rollup).Round(10*time.Microsecond), rollup[0].Round(10*time.Microsecond), rollup[len(rollup)-1].Round(10*time.Microsecond))
	fmt.Printf("  %-28s median %9v  range %v .. %v\n", "one pass over the ledger", med(onePass).Round(10*time.Microsecond), onePass[0].Round(10*time.Microsecond), onePass[len(onePass)-1].Round(10*time.Microsecond))
	fmt.Printf("  ratio (rollup / one pass): %.3f; target: under 50 ms; same totals: yes\n", float64(med(rollup))/float64(med(onePass)))
	return nil
}

func abs(f float64) float64 {
	if f < 0 {
		return -f
	}
	return f
}
