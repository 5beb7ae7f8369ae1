package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sbxedge/sbx/control/store"
)

// TestMarkUnavailable: connection failures are marked unavailable, a
// full disk full, and nothing else is: a statement's own error, a missing
// row, and above all the caller's cancellation (which pgconn calls safe to
// retry) stay what they are.
func TestMarkUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want error // the sentinel it must match; nil: neither
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, store.ErrUnavailable},
		{"connection exception", &pgconn.PgError{Code: "08006"}, store.ErrUnavailable},
		{"too many connections", &pgconn.PgError{Code: "53300"}, store.ErrUnavailable},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, store.ErrUnavailable},
		{"cut mid-read", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), store.ErrUnavailable},
		{"disk full", &pgconn.PgError{Code: "53100"}, store.ErrFull},
		{"unique violation", &pgconn.PgError{Code: "23505"}, nil},
		{"not found", store.ErrNotFound, nil},
		{"cancelled", fmt.Errorf("query: %w", context.Canceled), nil},
		{"deadline", context.DeadlineExceeded, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("step: %w", tc.err)
			got := markUnavailable(err)
			for _, sentinel := range []error{store.ErrUnavailable, store.ErrFull} {
				if errors.Is(got, sentinel) != (sentinel == tc.want) {
					t.Errorf("markUnavailable(%v) matches %v: got %v, want %v", err, sentinel, !(sentinel == tc.want), sentinel == tc.want)
				}
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("markUnavailable(%v) lost its cause: %v", err, got)
			}
		})
	}
}
