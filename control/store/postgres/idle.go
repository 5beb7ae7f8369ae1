package postgres

import (
	"context"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

// scanIdleCandidate scans one row of IdleCandidates.
func scanIdleCandidate(r backend.Row) (store.IdleCandidate, error) {
	var c store.IdleCandidate
	var secs int64
	err := r.Scan(&c.SandboxID, &c.AccountID, &c.ComputeSince, &secs)
	c.ComputeSince = c.ComputeSince.UTC()
	c.IdleTimeout = time.Duration(secs) * time.Second
	return c, err
}

func (q queries) IdleCandidates(ctx context.Context) ([]store.IdleCandidate, error) {
	return list(ctx, q.q, "list idle candidates", scanIdleCandidate, backend.IdleCandidates)
}

func (q queries) AccountIdleTimeout(ctx context.Context, accountID string) (time.Duration, error) {
	var secs *int64
	err := q.q.QueryRow(ctx, `SELECT idle_timeout_seconds FROM accounts WHERE id = $1`, accountID).Scan(&secs)
	if err != nil {
		return 0, notFound(err, "account")
	}
	if secs == nil {
		return 0, nil
	}
	return time.Duration(*secs) * time.Second, nil
}

func (t *tx) SetAccountIdleTimeout(ctx context.Context, accountID string, d time.Duration) error {
	var secs *int64
	if s := int64(d / time.Second); s > 0 {
		secs = &s
	}
	tag, err := t.q.Exec(ctx, `UPDATE accounts SET idle_timeout_seconds = $2 WHERE id = $1`, accountID, secs)
	return oneRow(tag, err, "set idle timeout of "+accountID, store.ErrNotFound)
}
