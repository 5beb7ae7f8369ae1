package postgres

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sbxedge/sbx/control/store"
)

// unavailable reports whether err is the connection failing rather than
// the statement: the server going away (a restart, a failover,
// pg_terminate_backend), refusing connections, or the network between.
func unavailable(err error) bool {
	// The caller's own deadline or cancellation is not an outage, though
	// pgconn reports one that struck before the write as safe to retry.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // admin_shutdown, crash_shutdown, cannot_connect_now
			"53300": // too_many_connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection_exception
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	// SafeToRetry: pgconn knows the statement never left (a connection
	// found closed before the write).
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || pgconn.SafeToRetry(err)
}

// markUnavailable returns err, marked with store.ErrFull when the
// server's disk is full, or with store.ErrUnavailable when it is the
// connection failing.
func markUnavailable(err error) error {
	var pgErr *pgconn.PgError
	switch {
	case err == nil, errors.Is(err, store.ErrUnavailable), errors.Is(err, store.ErrFull):
		return err
	case errors.As(err, &pgErr) && pgErr.Code == "53100": // disk_full
		return store.Mark(err, store.ErrFull)
	case unavailable(err):
		return store.Mark(err, store.ErrUnavailable)
	}
	return err
}

// marking is a querier whose errors, from the call or from reading its
// rows, carry store.ErrUnavailable when the connection failed.
type marking struct{ q querier }

func (m marking) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := m.q.Exec(ctx, sql, args...)
	return tag, markUnavailable(err)
}

func (m marking) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := m.q.Query(ctx, sql, args...)
	if err != nil {
		return rows, markUnavailable(err)
	}
	return markingRows{rows}, nil
}

func (m marking) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return markingRow{m.q.QueryRow(ctx, sql, args...)}
}

type markingRows struct{ pgx.Rows }

func (r markingRows) Err() error { return markUnavailable(r.Rows.Err()) }

type markingRow struct{ r pgx.Row }

func (r markingRow) Scan(dest ...any) error { return markUnavailable(r.r.Scan(dest...)) }
