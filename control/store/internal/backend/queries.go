package backend

import (
	"context"
	"fmt"
	"regexp"
	"time"
)

// DB is a backend's pool, database or transaction as the shared queries
// run statements on it. Statements are written with Postgres's $n
// placeholders; SQLite's DB renumbers them (Numbered).
type DB interface {
	QueryRow(ctx context.Context, query string, args ...any) Row
	Query(ctx context.Context, query string, args ...any) (Rows, error)
	// Exec runs a statement that returns no rows and reports how many it
	// touched.
	Exec(ctx context.Context, query string, args ...any) (rowsAffected int64, err error)
}

// Rows is a result set being read.
type Rows interface {
	Row
	Next() bool
	Err() error
	Close()
}

// Dialect is what the shared queries ask of a backend beyond its DB.
type Dialect struct {
	// NoRows is the driver's "no row" error.
	NoRows error
	// Conflict wraps a write's err with what, as store.ErrConflict when it
	// is a unique violation.
	Conflict func(err error, what string) error
	// Time is how a time is bound (Postgres: as is; SQLite: Unix
	// microseconds), and TimeDest a scan destination filling *t.
	Time     func(t time.Time) any
	TimeDest func(t *time.Time) any
	// NullTime binds a nullable time (nil: NULL), and NullTimeDest scans
	// one, leaving *t nil for NULL.
	NullTime     func(t *time.Time) any
	NullTimeDest func(t **time.Time) any
	// JSON binds an encoded JSON document (Postgres: bytes for jsonb;
	// SQLite: text).
	JSON func(doc []byte) any
	// Strings binds a list of strings (Postgres: text[]; SQLite: a JSON
	// array), and StringsDest scans one.
	Strings     func(v []string) any
	StringsDest func(v *[]string) any
}

// Queries are the statements both backends run as written here, on DB.
// Each backend's own queries embed it.
type Queries struct {
	DB      DB
	Dialect *Dialect
}

// timeOrNow binds t, or the current time when t is zero.
func (q Queries) timeOrNow(t time.Time) any {
	if t.IsZero() {
		t = time.Now()
	}
	return q.Dialect.Time(t)
}

// OneRow wraps a write's error with what, and reports a write that
// touched no row (n) as none: store.ErrConflict for an insert that met an
// existing row (ON CONFLICT DO NOTHING), store.ErrNotFound for a change to
// a missing one.
func OneRow(n int64, err error, what string, none error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n == 0 {
		return fmt.Errorf("%s: %w", what, none)
	}
	return nil
}

// List runs query and scans every row with scan; an error is wrapped with
// what.
func List[T any](ctx context.Context, db DB, what string, scan func(Row) (T, error), query string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

// Numbered rewrites query's $n placeholders as SQLite's ?n, which binds
// the same n-th argument.
func Numbered(query string) string { return placeholder.ReplaceAllString(query, "?$1") }
