package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// scanIdleCandidate scans one row of IdleCandidates.
func scanIdleCandidate(r scanner) (store.IdleCandidate, error) {
	var c store.IdleCandidate
	var since, secs int64
	err := r.Scan(&c.SandboxID, &c.AccountID, &since, &secs)
	c.ComputeSince = fromMicros(since)
	c.IdleTimeout = time.Duration(secs) * time.Second
	return c, err
}

func (q queries) IdleCandidates(ctx context.Context) ([]store.IdleCandidate, error) {
	return list(ctx, q.q, "list idle candidates", scanIdleCandidate, backend.IdleCandidates)
}

func (q queries) AccountIdleTimeout(ctx context.Context, accountID string) (time.Duration, error) {
	var secs sql.NullInt64
	err := q.q.QueryRowContext(ctx, `SELECT idle_timeout_seconds FROM accounts WHERE id = ?`, accountID).Scan(&secs)
	if err != nil {
		return 0, notFound(err, "account")
	}
	return time.Duration(secs.Int64) * time.Second, nil
}

func (t *tx) SetAccountIdleTimeout(ctx context.Context, accountID string, d time.Duration) error {
	var secs any
	if s := int64(d / time.Second); s > 0 {
		secs = s
	}
	res, err := t.q.ExecContext(ctx, `UPDATE accounts SET idle_timeout_seconds = ? WHERE id = ?`, secs, accountID)
	return oneRow(res, err, "set idle timeout of "+accountID, store.ErrNotFound)
}
