package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store/internal/jobqueue"
)

// reclaimSQL is jobqueue.Runner.Reclaim on River's own job table (its
// SQLite form: JSON in blobs, times as River's text format): the state
// guard and the last-attempt match are in the UPDATE itself. The attempt
// error has River's AttemptError shape.
const reclaimSQL = `
UPDATE river_job SET
    state = CASE
        WHEN json_extract(metadata, '$.cancel_attempted_at') IS NOT NULL THEN 'cancelled'
        WHEN attempt >= max_attempts THEN 'discarded'
        ELSE 'available'
    END,
    finalized_at = CASE
        WHEN json_extract(metadata, '$.cancel_attempted_at') IS NOT NULL OR attempt >= max_attempts THEN ?2
    END,
    errors = json_insert(coalesce(errors, json('[]')), '$[#]',
        json_object('at', ?3, 'attempt', attempt, 'error', ?4, 'trace', ''))
WHERE state = 'running' AND json_extract(attempted_by, '$[#-1]') = ?1`

// riverTimeFormat is how River's SQLite driver writes times: other
// layouts store fine but compare wrongly against its own.
const riverTimeFormat = "2006-01-02 15:04:05.999"

func reclaimer(db *sql.DB) func(ctx context.Context, clientID string, at time.Time) (int64, error) {
	return func(ctx context.Context, clientID string, at time.Time) (int64, error) {
		at = at.UTC().Round(time.Millisecond)
		res, err := db.ExecContext(ctx, reclaimSQL, clientID, at.Format(riverTimeFormat),
			at.Format(time.RFC3339Nano), jobqueue.ReclaimError)
		if err != nil {
			return 0, fmt.Errorf("requeue running jobs of %s: %w", clientID, err)
		}
		n, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("requeue running jobs of %s: rows affected: %w", clientID, err)
		}
		return n, nil
	}
}
