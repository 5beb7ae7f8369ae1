package backend

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// WarmClaim is the pod sandboxID claimed, or "" when it holds none: a
// retried provision finds its own claim before it claims another.
func (q Queries) WarmClaim(ctx context.Context, sandboxID string) (string, error) {
	var pod string
	err := q.DB.QueryRow(ctx, `SELECT pod FROM warm_pods WHERE claimed_by = $1`, sandboxID).Scan(&pod)
	if errors.Is(err, q.Dialect.NoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("look up warm claim of %s: %w", sandboxID, err)
	}
	return pod, nil
}

func (q Queries) scanWarmPod(r Row) (store.WarmPod, error) {
	var w store.WarmPod
	err := r.Scan(&w.Pod, &w.Profile, &w.Image, &w.ClaimedBy, q.Dialect.TimeDest(&w.CreatedAt), q.Dialect.NullTimeDest(&w.ClaimedAt))
	w.CreatedAt, w.ClaimedAt = w.CreatedAt.UTC(), store.UTCPtr(w.ClaimedAt)
	return w, err
}

// WarmPods lists every row, oldest first.
func (q Queries) WarmPods(ctx context.Context) ([]store.WarmPod, error) {
	return List(ctx, q.DB, "list warm pods", q.scanWarmPod, `SELECT pod, profile, image, coalesce(claimed_by, ''), created_at, claimed_at
		FROM warm_pods ORDER BY created_at, pod`)
}

// AddWarmPod records a booted pod; a pod recorded already is left as is.
func (q Queries) AddWarmPod(ctx context.Context, w store.WarmPod) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO warm_pods (pod, profile, image, created_at)
		VALUES ($1, $2, $3, $4) ON CONFLICT (pod) DO NOTHING`, w.Pod, w.Profile, w.Image, q.timeOrNow(w.CreatedAt))
	if err != nil {
		return fmt.Errorf("add warm pod %s: %w", w.Pod, err)
	}
	return nil
}

// RemoveWarmPod deletes a pod's row.
func (q Queries) RemoveWarmPod(ctx context.Context, pod string) error {
	if _, err := q.DB.Exec(ctx, `DELETE FROM warm_pods WHERE pod = $1`, pod); err != nil {
		return fmt.Errorf("remove warm pod %s: %w", pod, err)
	}
	return nil
}

// RemoveFreeWarmPod deletes a pod's row if it is unclaimed.
func (q Queries) RemoveFreeWarmPod(ctx context.Context, pod string) (bool, error) {
	n, err := q.DB.Exec(ctx, `DELETE FROM warm_pods WHERE pod = $1 AND claimed_by IS NULL`, pod)
	if err != nil {
		return false, fmt.Errorf("remove free warm pod %s: %w", pod, err)
	}
	return n == 1, nil
}

// ReleaseWarmPod deletes the row of the pod sandboxID claimed, if any.
func (q Queries) ReleaseWarmPod(ctx context.Context, sandboxID string) error {
	if _, err := q.DB.Exec(ctx, `DELETE FROM warm_pods WHERE claimed_by = $1`, sandboxID); err != nil {
		return fmt.Errorf("release warm pod of %s: %w", sandboxID, err)
	}
	return nil
}
