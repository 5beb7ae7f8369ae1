package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// querier is what both *sql.DB and *sql.Tx offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queries implements store.Reader on the database or on a transaction;
// the statements shared with Postgres come from backend.Queries.
type queries struct {
	q querier
	backend.Queries
}

func newQueries(q querier) queries {
	return queries{q: q, Queries: backend.Queries{DB: sharedDB{q}, Dialect: &dialect}}
}

// sharedDB runs backend's statements, renumbering their placeholders.
type sharedDB struct{ q querier }

func (d sharedDB) QueryRow(ctx context.Context, query string, args ...any) backend.Row {
	return d.q.QueryRowContext(ctx, backend.Numbered(query), args...)
}

func (d sharedDB) Query(ctx context.Context, query string, args ...any) (backend.Rows, error) {
	rows, err := d.q.QueryContext(ctx, backend.Numbered(query), args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (d sharedDB) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := d.q.ExecContext(ctx, backend.Numbered(query), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// sqlRows drops the error of Close, as pgx's rows do: a read's errors
// surface through Err.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// Times are stored as unix microseconds, the precision Postgres keeps, so
// both backends round-trip the same values.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(v int64) time.Time { return time.UnixMicro(v).UTC() }

func nullMicros(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func orNow(t time.Time) int64 {
	if t.IsZero() {
		return time.Now().UnixMicro()
	}
	return t.UnixMicro()
}

// microsDest scans a time stored as Unix microseconds.
type microsDest struct{ t *time.Time }

func (d microsDest) Scan(src any) error {
	v, ok := src.(int64)
	if !ok {
		return fmt.Errorf("time column holds %T, want Unix microseconds", src)
	}
	*d.t = fromMicros(v)
	return nil
}

// nullMicrosDest scans a nullable time stored as Unix microseconds.
type nullMicrosDest struct{ t **time.Time }

func (d nullMicrosDest) Scan(src any) error {
	if src == nil {
		*d.t = nil
		return nil
	}
	var t time.Time
	if err := (microsDest{&t}).Scan(src); err != nil {
		return err
	}
	*d.t = &t
	return nil
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// jsonListDest scans a list of strings stored as a JSON array.
type jsonListDest struct{ v *[]string }

func (d jsonListDest) Scan(src any) error {
	var doc []byte
	switch src := src.(type) {
	case string:
		doc = []byte(src)
	case []byte:
		doc = src
	default:
		return fmt.Errorf("list column holds %T, want a JSON array", src)
	}
	if err := json.Unmarshal(doc, d.v); err != nil {
		return fmt.Errorf("decode list: %w", err)
	}
	return nil
}

// dialect is how SQLite differs under backend's shared statements: times
// as Unix microseconds, and its own "no row" and constraint errors.
var dialect = backend.Dialect{
	NoRows:       sql.ErrNoRows,
	Conflict:     conflict,
	Time:         func(t time.Time) any { return micros(t) },
	TimeDest:     func(t *time.Time) any { return microsDest{t} },
	NullTime:     func(t *time.Time) any { return nullMicros(t) },
	NullTimeDest: func(t **time.Time) any { return nullMicrosDest{t} },
	JSON:         func(doc []byte) any { return string(doc) },
	Strings:      func(v []string) any { return jsonList(v) },
	StringsDest:  func(v *[]string) any { return jsonListDest{v} },
}

// scanner is *sql.Row or *sql.Rows.
type scanner = backend.Row

// list runs query and scans every row with scan; an error is wrapped
// with what.
func list[T any](ctx context.Context, q querier, what string, scan func(scanner) (T, error), query string, args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := collect(rows, scan)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// collect scans every row with scan and closes rows.
func collect[T any](rows *sql.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// inList returns "(?, ?, ...)" and the arguments for an IN clause.
func inList[S ~string](vals []S) (string, []any) {
	args := make([]any, len(vals))
	for i, v := range vals {
		args[i] = string(v)
	}
	return "(" + strings.TrimSuffix(strings.Repeat("?, ", len(vals)), ", ") + ")", args
}

const sandboxCols = backend.SandboxCols

func (q queries) sandboxes(ctx context.Context, what, query string, args ...any) ([]store.Sandbox, error) {
	return list(ctx, q.q, what, q.ScanSandbox, query, args...)
}

func (q queries) Sandboxes(ctx context.Context, opts store.ListOptions) ([]store.Sandbox, error) {
	limit := backend.Limit(opts.Limit)
	query := `SELECT ` + sandboxCols + ` FROM sandboxes WHERE account_id = ?`
	args := []any{opts.AccountID}
	if len(opts.States) > 0 {
		in, stateArgs := inList(opts.States)
		query += ` AND state IN ` + in
		args = append(args, stateArgs...)
	}
	if opts.Before != "" {
		// The cursor row is looked up within the same account, so a
		// foreign ID yields an empty page rather than a peek at another
		// account.
		query += ` AND (created_at, id) < (SELECT c.created_at, c.id FROM sandboxes c WHERE c.id = ? AND c.account_id = ?)`
		args = append(args, opts.Before, opts.AccountID)
	}
	if opts.Name != "" {
		query += ` AND name = ?`
		args = append(args, opts.Name)
	}
	for _, k := range slices.Sorted(maps.Keys(opts.Labels)) {
		// The key travels as a bound JSON path, quoted: a key is never
		// spliced into the statement.
		query += ` AND json_extract(labels, ?) = ?`
		args = append(args, `$."`+strings.ReplaceAll(k, `"`, `\"`)+`"`, opts.Labels[k])
	}
	query += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	return q.sandboxes(ctx, "list sandboxes", query, append(args, limit)...)
}

func (q queries) SandboxesInStates(ctx context.Context, states ...store.State) ([]store.Sandbox, error) {
	if len(states) == 0 {
		return nil, nil
	}
	in, args := inList(states)
	return q.sandboxes(ctx, "sandboxes in states", `SELECT `+sandboxCols+` FROM sandboxes
		WHERE state IN `+in+` ORDER BY created_at, id`, args...)
}

// scanUsageRow scans one row of Usage.
func scanUsageRow(r scanner) (store.UsageRow, error) {
	var u store.UsageRow
	var kind string
	var us int64
	err := r.Scan(&u.Platform, &kind, &us)
	u.Kind, u.Seconds = store.SessionKind(kind), float64(us)/1e6
	return u, err
}

func (q queries) Usage(ctx context.Context, accountID string, from, to, now time.Time) ([]store.UsageRow, error) {
	// Each session is clipped to [from, to) and an open one runs until
	// now; the WHERE clause keeps only intervals that stay positive. The
	// sum is exact integer microseconds, converted to seconds once.
	return list(ctx, q.q, "usage of "+accountID, scanUsageRow, `SELECT platform, kind,
			sum(min(coalesce(ended_at, :now), :to) - max(started_at, :from))
		FROM sandbox_sessions
		WHERE account_id = :account
		  AND started_at < :to
		  AND coalesce(ended_at, :now) > :from
		  AND coalesce(ended_at, :now) > started_at
		GROUP BY platform, kind
		ORDER BY platform, kind`,
		sql.Named("account", accountID), sql.Named("from", micros(from)),
		sql.Named("to", micros(to)), sql.Named("now", micros(now)))
}

func (q queries) LiveCounts(ctx context.Context) ([]store.LiveCount, error) {
	in, args := inList(append(append([]store.State{}, store.PodStates...), store.StateSuspended))
	return list(ctx, q.q, "live counts", backend.ScanLiveCount, `SELECT account_id, platform, state, count(*) FROM sandboxes
		WHERE state IN `+in+` GROUP BY account_id, platform, state ORDER BY account_id, platform, state`, args...)
}
