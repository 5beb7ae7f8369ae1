package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// ClaimWarmPod claims the oldest free pod of profile. One UPDATE statement
// is atomic in SQLite, which also serialises writers.
func (s *Store) ClaimWarmPod(ctx context.Context, profile, sandboxID string) (string, error) {
	pod, err := s.WarmClaim(ctx, sandboxID)
	if err != nil || pod != "" {
		return pod, err
	}
	err = s.db.QueryRowContext(ctx, `UPDATE warm_pods SET claimed_by = ?2, claimed_at = ?3
		WHERE pod = (SELECT pod FROM warm_pods WHERE profile = ?1 AND claimed_by IS NULL
			ORDER BY created_at, pod LIMIT 1)
		AND claimed_by IS NULL
		RETURNING pod`, profile, sandboxID, time.Now().UnixMicro()).Scan(&pod)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("claim warm pod of %s for %s: %w", profile, sandboxID, err)
	}
	return pod, nil
}

// WithWarmLock runs fn unless another caller in this process is: a SQLite
// store has one process, so a mutex is the whole lock.
func (s *Store) WithWarmLock(ctx context.Context, fn func(context.Context) error) (bool, error) {
	if !s.warmMu.TryLock() {
		return false, nil
	}
	defer s.warmMu.Unlock()
	return true, fn(ctx)
}
