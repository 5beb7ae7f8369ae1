package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sbxedge/sbx/control/store/internal/jobqueue"
)

// reclaimSQL is jobqueue.Runner.Reclaim on River's own job table: the
// state guard and the last-attempt match are in the UPDATE itself, so a
// job that another client has taken since (after River's stuck-job
// rescue) is left alone. The attempt error has River's AttemptError shape.
const reclaimSQL = `
UPDATE river_job SET
    state = CASE
        WHEN metadata ? 'cancel_attempted_at' THEN 'cancelled'::river_job_state
        WHEN attempt >= max_attempts THEN 'discarded'::river_job_state
        ELSE 'available'::river_job_state
    END,
    finalized_at = CASE
        WHEN metadata ? 'cancel_attempted_at' OR attempt >= max_attempts THEN $2::timestamptz
    END,
    errors = array_append(errors, jsonb_build_object(
        'at', $2::timestamptz, 'attempt', attempt, 'error', $3::text, 'trace', ''))
WHERE state = 'running' AND attempted_by[cardinality(attempted_by)] = $1`

func reclaimer(pool *pgxpool.Pool) func(ctx context.Context, clientID string, at time.Time) (int64, error) {
	return func(ctx context.Context, clientID string, at time.Time) (int64, error) {
		tag, err := pool.Exec(ctx, reclaimSQL, clientID, at, jobqueue.ReclaimError)
		if err != nil {
			return 0, fmt.Errorf("requeue running jobs of %s: %w", clientID, err)
		}
		return tag.RowsAffected(), nil
	}
}
