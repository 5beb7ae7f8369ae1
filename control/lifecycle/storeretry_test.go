package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func noBackoff(int) time.Duration { return 0 }

func TestRetryUntilWaitsOutAnOutage(t *testing.T) {
	calls := 0
	err := retryUntil(context.Background(), slog.New(slog.DiscardHandler), "step", noBackoff, func() error {
		calls++
		if calls < 4 {
			return errors.New("conn closed")
		}
		return nil
	})
	if err != nil || calls != 4 {
		t.Fatalf("err %v after %d calls, want nil after 4", err, calls)
	}
}

func TestRetryUntilStopsOnNotFound(t *testing.T) {
	calls := 0
	err := retryUntil(context.Background(), slog.New(slog.DiscardHandler), "step", noBackoff, func() error {
		calls++
		return store.ErrNotFound
	})
	if !errors.Is(err, store.ErrNotFound) || calls != 1 {
		t.Fatalf("err %v after %d calls, want ErrNotFound after 1", err, calls)
	}
}

func TestRetryUntilEndsWithItsContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	down := errors.New("conn refused")
	calls := 0
	err := retryUntil(ctx, slog.New(slog.DiscardHandler), "step", noBackoff, func() error {
		calls++
		if calls == 3 {
			cancel()
		}
		return down
	})
	if !errors.Is(err, down) || calls != 3 {
		t.Fatalf("err %v after %d calls, want the step's error after 3", err, calls)
	}
}
