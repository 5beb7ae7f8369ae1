package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// ClaimWarmPod claims the oldest free pod of profile in one UPDATE. SKIP
// LOCKED lets concurrent claims pass over a row another transaction is
// taking instead of queueing behind it, and the outer claimed_by IS NULL
// re-check means a row taken meanwhile is never handed out twice.
func (s *Store) ClaimWarmPod(ctx context.Context, profile, sandboxID string) (string, error) {
	pod, err := s.WarmClaim(ctx, sandboxID)
	if err != nil || pod != "" {
		return pod, err
	}
	err = s.pool.QueryRow(ctx, `UPDATE warm_pods SET claimed_by = $2, claimed_at = now()
		WHERE pod = (
			SELECT pod FROM warm_pods
			WHERE profile = $1 AND claimed_by IS NULL
			ORDER BY created_at, pod
			LIMIT 1
			FOR UPDATE SKIP LOCKED)
		AND claimed_by IS NULL
		RETURNING pod`, profile, sandboxID).Scan(&pod)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim warm pod of %s for %s: %w", profile, sandboxID, err)
	}
	return pod, nil
}

// warmLockKey is the advisory lock the warm pool replenisher holds.
const warmLockKey int64 = 0x5b7ed6e0006

// WithWarmLock runs fn while holding a session advisory lock on a
// dedicated connection; when another replica holds it, fn is skipped.
func (s *Store) WithWarmLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, fmt.Errorf("acquire connection for warm lock: %w", err)
	}
	defer conn.Release()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, warmLockKey).Scan(&got); err != nil {
		return false, fmt.Errorf("take warm lock: %w", err)
	}
	if !got {
		return false, nil
	}
	defer func() {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, warmLockKey); err != nil {
			// Closing the connection releases the lock with the session.
			conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	return true, fn(ctx)
}
