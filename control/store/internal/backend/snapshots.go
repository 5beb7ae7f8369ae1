package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sbxedge/sbx/control/store"
)

const snapshotCols = `id, account_id, sandbox_id, platform, profile, name, labels, state, reason, created_at, ready_at, deleted_at`

func (q Queries) scanSnapshot(r Row) (store.Snapshot, error) {
	var s store.Snapshot
	var state string
	var labels []byte
	d := q.Dialect
	if err := r.Scan(&s.ID, &s.AccountID, &s.SandboxID, &s.Platform, &s.Profile, &s.Name, &labels, &state, &s.Reason,
		d.TimeDest(&s.CreatedAt), d.NullTimeDest(&s.ReadyAt), d.NullTimeDest(&s.DeletedAt)); err != nil {
		return store.Snapshot{}, err
	}
	if err := json.Unmarshal(labels, &s.Labels); err != nil {
		return store.Snapshot{}, fmt.Errorf("decode labels of snapshot %s: %w", s.ID, err)
	}
	if len(s.Labels) == 0 {
		s.Labels = nil
	}
	s.State = store.SnapshotState(state)
	s.CreatedAt, s.ReadyAt, s.DeletedAt = s.CreatedAt.UTC(), store.UTCPtr(s.ReadyAt), store.UTCPtr(s.DeletedAt)
	return s, nil
}

// Snapshot implements store.Reader.
func (q Queries) Snapshot(ctx context.Context, id string) (store.Snapshot, error) {
	s, err := q.scanSnapshot(q.DB.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1`, id))
	if err != nil {
		return store.Snapshot{}, NotFound(err, q.Dialect.NoRows, "snapshot "+id)
	}
	return s, nil
}

// Snapshots implements store.Reader. The states are filtered here, not in
// SQL: an account holds few snapshots, and the statement stays one for
// both backends.
func (q Queries) Snapshots(ctx context.Context, opts store.SnapshotListOptions) ([]store.Snapshot, error) {
	list, err := List(ctx, q.DB, "snapshots of "+opts.AccountID, q.scanSnapshot, `SELECT `+snapshotCols+` FROM snapshots
		WHERE account_id = $1 AND ($2 = '' OR sandbox_id = $2)
		ORDER BY created_at DESC, id DESC`, opts.AccountID, opts.SandboxID)
	if err != nil || len(opts.States) == 0 {
		return list, err
	}
	return slices.DeleteFunc(list, func(s store.Snapshot) bool { return !slices.Contains(opts.States, s.State) }), nil
}

// InsertSnapshot implements store.Tx.
func (q Queries) InsertSnapshot(ctx context.Context, s store.Snapshot) error {
	d := q.Dialect
	n, err := q.DB.Exec(ctx, `INSERT INTO snapshots (`+snapshotCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT DO NOTHING`,
		s.ID, s.AccountID, s.SandboxID, s.Platform, s.Profile, s.Name, d.JSON(s.LabelsJSON()), string(s.State), s.Reason,
		q.timeOrNow(s.CreatedAt), d.NullTime(s.ReadyAt), d.NullTime(s.DeletedAt))
	return OneRow(n, err, "insert snapshot "+s.ID, store.ErrConflict)
}

// UpdateSnapshot implements store.Tx.
func (q Queries) UpdateSnapshot(ctx context.Context, s store.Snapshot) error {
	d := q.Dialect
	n, err := q.DB.Exec(ctx, `UPDATE snapshots SET state = $2, reason = $3, ready_at = $4, deleted_at = $5
		WHERE id = $1`, s.ID, string(s.State), s.Reason, d.NullTime(s.ReadyAt), d.NullTime(s.DeletedAt))
	return OneRow(n, err, "update snapshot "+s.ID, store.ErrNotFound)
}
