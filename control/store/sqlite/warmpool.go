package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// ClaimWarmPod claims the oldest free pod of profile. One UPDATE statement
// is atomic in SQLite, which also serialises writers.
func (s *Store) ClaimWarmPod(ctx context.Context, profile, sandboxID string) (string, error) {
	var pod string
	err := s.db.QueryRowContext(ctx, `SELECT pod FROM warm_pods WHERE claimed_by = ?`, sandboxID).Scan(&pod)
	if err == nil {
		return pod, nil
	}
	if !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("look up warm claim of %s: %w", sandboxID, err)
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

// WarmPods lists every row, oldest first.
func (s *Store) WarmPods(ctx context.Context) ([]store.WarmPod, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT pod, profile, image, coalesce(claimed_by, ''), created_at, claimed_at
		FROM warm_pods ORDER BY created_at, pod`)
	if err != nil {
		return nil, fmt.Errorf("list warm pods: %w", err)
	}
	defer rows.Close()
	var out []store.WarmPod
	for rows.Next() {
		var w store.WarmPod
		var created int64
		var claimed sql.NullInt64
		if err := rows.Scan(&w.Pod, &w.Profile, &w.Image, &w.ClaimedBy, &created, &claimed); err != nil {
			return nil, fmt.Errorf("list warm pods: %w", err)
		}
		w.CreatedAt = fromMicros(created)
		if claimed.Valid {
			t := fromMicros(claimed.Int64)
			w.ClaimedAt = &t
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list warm pods: %w", err)
	}
	return out, nil
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
