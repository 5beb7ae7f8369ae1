package sqlite

import (
	"context"
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
