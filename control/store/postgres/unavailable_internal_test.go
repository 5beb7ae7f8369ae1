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

// TestMarkUnavailable: connection failures are marked, and nothing else
// is: a statement's own error, a missing row, and above all the caller's
// cancellation (which pgconn calls safe to retry) stay what they are.
func TestMarkUnavailable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"admin shutdown", &pgconn.PgError{Code: "57P01"}, true},
		{"connection exception", &pgconn.PgError{Code: "08006"}, true},
		{"too many connections", &pgconn.PgError{Code: "53300"}, true},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, true},
		{"cut mid-read", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"unique violation", &pgconn.PgError{Code: "23505"}, false},
		{"not found", store.ErrNotFound, false},
		{"cancelled", fmt.Errorf("query: %w", context.Canceled), false},
		{"deadline", context.DeadlineExceeded, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("step: %w", tc.err)
			got := markUnavailable(err)
			if errors.Is(got, store.ErrUnavailable) != tc.want {
				t.Errorf("markUnavailable(%v) matches ErrUnavailable: got %v, want %v", err, !tc.want, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Errorf("markUnavailable(%v) lost its cause: %v", err, got)
			}
		})
	}
}
