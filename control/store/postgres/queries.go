package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// querier is what both the pool and a transaction offer.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// queries implements store.Reader on the pool or on a transaction; the
// statements shared with SQLite come from backend.Queries.
type queries struct {
	q querier
	backend.Queries
}

func newQueries(q querier) queries {
	q = marking{q}
	return queries{q: q, Queries: backend.Queries{DB: sharedDB{q}, Dialect: &dialect}}
}

// dialect is how Postgres differs under backend's shared statements: none
// but its own "no row" and unique-violation errors.
var dialect = backend.Dialect{
	NoRows:   pgx.ErrNoRows,
	Conflict: conflict,
	Time:     func(t time.Time) any { return t },
	TimeDest: func(t *time.Time) any { return t },
	// pgx binds a nil *time.Time as NULL and scans NULL as nil.
	NullTime:     func(t *time.Time) any { return t },
	NullTimeDest: func(t **time.Time) any { return t },
	JSON:         func(doc []byte) any { return doc },
	Strings:      func(v []string) any { return v },
	StringsDest:  func(v *[]string) any { return v },
}

// sharedDB runs backend's statements, written for Postgres, as they are.
type sharedDB struct{ q querier }

func (d sharedDB) QueryRow(ctx context.Context, sql string, args ...any) backend.Row {
	return d.q.QueryRow(ctx, sql, args...)
}

func (d sharedDB) Query(ctx context.Context, sql string, args ...any) (backend.Rows, error) {
	rows, err := d.q.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

func (d sharedDB) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := d.q.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

// notFound turns pgx.ErrNoRows into store.ErrNotFound, wrapped with what
// was looked up.
func notFound(err error, what string) error { return backend.NotFound(err, pgx.ErrNoRows, what) }

// list runs sql and scans every row with scan; an error is wrapped with
// what.
func list[T any](ctx context.Context, q querier, what string, scan func(backend.Row) (T, error), sql string, args ...any) ([]T, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (T, error) { return scan(r) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// oneRow is backend.OneRow on a command tag.
func oneRow(tag pgconn.CommandTag, err error, what string, none error) error {
	return backend.OneRow(tag.RowsAffected(), err, what, none)
}

// conflict maps unique violations to store.ErrConflict.
func conflict(err error, what string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return fmt.Errorf("%s: %w (%s)", what, store.ErrConflict, pgErr.ConstraintName)
	}
	return fmt.Errorf("%s: %w", what, err)
}

const sandboxCols = backend.SandboxCols

func (q queries) sandboxes(ctx context.Context, what, sql string, args ...any) ([]store.Sandbox, error) {
	return list(ctx, q.q, what, q.ScanSandbox, sql, args...)
}

func (q queries) Sandboxes(ctx context.Context, opts store.ListOptions) ([]store.Sandbox, error) {
	limit := backend.Limit(opts.Limit)
	states := make([]string, len(opts.States))
	for i, s := range opts.States {
		states[i] = string(s)
	}
	labels := (&store.Sandbox{Labels: opts.Labels}).LabelsJSON()
	// The cursor row is looked up within the same account, so a foreign ID
	// yields an empty page rather than a peek at another account.
	return q.sandboxes(ctx, "list sandboxes", `SELECT `+sandboxCols+` FROM sandboxes
		WHERE account_id = $1
		  AND (cardinality($2::text[]) = 0 OR state = ANY($2))
		  AND ($3 = '' OR (created_at, id) < (SELECT c.created_at, c.id FROM sandboxes c WHERE c.id = $3 AND c.account_id = $1))
		  AND ($5 = '' OR name = $5)
		  AND labels @> $6::jsonb
		ORDER BY created_at DESC, id DESC
		LIMIT $4`, opts.AccountID, states, opts.Before, limit, opts.Name, labels)
}

func (q queries) SandboxesInStates(ctx context.Context, states ...store.State) ([]store.Sandbox, error) {
	ss := make([]string, len(states))
	for i, s := range states {
		ss[i] = string(s)
	}
	return q.sandboxes(ctx, "sandboxes in states", `SELECT `+sandboxCols+` FROM sandboxes
		WHERE state = ANY($1) ORDER BY created_at, id`, ss)
}

// scanUsageRow scans one row of Usage.
func scanUsageRow(r backend.Row) (store.UsageRow, error) {
	var u store.UsageRow
	var kind string
	err := r.Scan(&u.Platform, &kind, &u.Seconds)
	u.Kind = store.SessionKind(kind)
	return u, err
}

func (q queries) Usage(ctx context.Context, accountID string, from, to, now time.Time) ([]store.UsageRow, error) {
	// Whole UTC hours of the window come from the rollup of closed
	// sessions (usage_hourly, migration 0020); the partial hours at its
	// edges from closed sessions overlapping them (the span index); open
	// sessions run until now. Each session is clipped to its piece of
	// [from, to), so the pieces add up to what one pass over the ledger
	// gives (TestUsageRollupMatchesLedger).
	from, to = from.UTC(), to.UTC()
	first, last := from.Truncate(time.Hour), to.Truncate(time.Hour)
	if first.Before(from) {
		first = first.Add(time.Hour)
	}
	if !first.Before(last) {
		first, last = to, to // no whole hour: the edges cover the window
	}
	return list(ctx, q.q, "usage of "+accountID, scanUsageRow, `SELECT platform, kind, sum(s)::float8 FROM (
			SELECT platform, kind, seconds AS s FROM usage_hourly
			WHERE account_id = $1 AND hour >= $5::timestamptz AT TIME ZONE 'UTC' AND hour < $6::timestamptz AT TIME ZONE 'UTC'
		UNION ALL
			SELECT platform, kind, extract(epoch FROM least(ended_at, $5) - greatest(started_at, $2))
			FROM sandbox_sessions
			WHERE account_id = $1 AND ended_at > started_at AND $2 < $5
				AND tstzrange(started_at, ended_at) && tstzrange($2, $5)
		UNION ALL
			SELECT platform, kind, extract(epoch FROM least(ended_at, $3) - greatest(started_at, $6))
			FROM sandbox_sessions
			WHERE account_id = $1 AND ended_at > started_at AND $6 < $3
				AND tstzrange(started_at, ended_at) && tstzrange($6, $3)
		UNION ALL
			SELECT platform, kind, extract(epoch FROM least($4, $3) - greatest(started_at, $2))
			FROM sandbox_sessions
			WHERE account_id = $1 AND ended_at IS NULL AND started_at < least($4, $3) AND $4 > $2
		) AS u
		GROUP BY platform, kind
		ORDER BY platform, kind`, accountID, from, to, now, first, last)
}

// liveStates is store.PodStates as strings.
func liveStates() []string {
	ss := make([]string, len(store.PodStates))
	for i, s := range store.PodStates {
		ss[i] = string(s)
	}
	return ss
}

func (q queries) LiveCounts(ctx context.Context) ([]store.LiveCount, error) {
	return list(ctx, q.q, "live counts", backend.ScanLiveCount, `SELECT account_id, platform, state, count(*) FROM sandboxes
		WHERE state = ANY($1) GROUP BY account_id, platform, state ORDER BY account_id, platform, state`,
		append(liveStates(), string(store.StateSuspended)))
}
