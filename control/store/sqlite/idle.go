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
	var since, secs, own int64
	err := r.Scan(&c.SandboxID, &c.AccountID, &since, &secs, &own, &c.IgnoreBusy)
	c.ComputeSince = fromMicros(since)
	c.IdleTimeout = time.Duration(secs) * time.Second
	c.OwnIdleTimeout = time.Duration(own) * time.Second
	return c, err
}

func (q queries) IdleCandidates(ctx context.Context) ([]store.IdleCandidate, error) {
	return list(ctx, q.q, "list idle candidates", scanIdleCandidate, backend.IdleCandidates)
}
