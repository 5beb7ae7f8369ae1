package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// storeRetryMax bounds the wait between tries of a store step, so that a
// worker notices within seconds that the database is back.
const storeRetryMax = 5 * time.Second

// retryStore runs a store step of a job again, after a backoff, until
// it succeeds, reports a missing row, or ctx (the job's timeout) ends.
//
// Why in the worker and not through River's retry: when a job returns
// while Postgres is away, River's completer cannot record the outcome
// either (it gives up after ~7 s), and the job stays `running` until the
// stuck-job rescue, past the sandbox's provisioning deadline. A worker
// that waits out the outage itself returns only once the database
// answers again, so its outcome is recorded. The steps retried are
// idempotent: each re-reads the sandbox's state in its transaction.
func (m *Manager) retryStore(ctx context.Context, what string, step func() error) error {
	return retryUntil(ctx, m.log, what, func(attempt int) time.Duration {
		return min(retryBackoff(attempt), storeRetryMax)
	}, step)
}

func retryUntil(ctx context.Context, log *slog.Logger, what string, backoff func(attempt int) time.Duration, step func() error) error {
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || errors.Is(err, store.ErrNotFound) || ctx.Err() != nil {
			return err
		}
		d := backoff(attempt)
		log.WarnContext(ctx, "store step failed; retrying", "step", what, "attempt", attempt, "after", d, "err", err)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%s: %w (gave up: %w)", what, err, context.Cause(ctx))
		case <-t.C:
		}
	}
}
