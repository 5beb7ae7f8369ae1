package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func (q Queries) scanShare(row Row) (store.Share, error) {
	var s store.Share
	err := row.Scan(&s.ID, &s.SandboxID, &s.AccountID, &s.Port, &s.Hash, &s.Note, &s.CreatedBy,
		q.Dialect.TimeDest(&s.CreatedAt), q.Dialect.TimeDest(&s.ExpiresAt),
		q.Dialect.NullTimeDest(&s.FirstUsedAt), q.Dialect.NullTimeDest(&s.RevokedAt))
	if err != nil {
		return store.Share{}, err
	}
	s.CreatedAt, s.ExpiresAt = s.CreatedAt.UTC(), s.ExpiresAt.UTC()
	for _, t := range []*time.Time{s.FirstUsedAt, s.RevokedAt} {
		if t != nil {
			*t = t.UTC()
		}
	}
	return s, nil
}

// Shares implements store.Reader.
func (q Queries) Shares(ctx context.Context, sandboxID string) ([]store.Share, error) {
	return List(ctx, q.DB, "list shares of "+sandboxID, q.scanShare,
		`SELECT `+ShareCols+` FROM preview_shares WHERE sandbox_id = $1 ORDER BY created_at DESC, id DESC`, sandboxID)
}

// ShareByID implements store.Reader.
func (q Queries) ShareByID(ctx context.Context, id string) (store.Share, error) {
	s, err := q.scanShare(q.DB.QueryRow(ctx, `SELECT `+ShareCols+` FROM preview_shares WHERE id = $1`, id))
	if err != nil {
		return store.Share{}, NotFound(err, q.Dialect.NoRows, "share "+id)
	}
	return s, nil
}

// ShareByHash implements store.Reader.
func (q Queries) ShareByHash(ctx context.Context, hash []byte) (store.Share, error) {
	s, err := q.scanShare(q.DB.QueryRow(ctx, `SELECT `+ShareCols+` FROM preview_shares WHERE hash = $1`, hash))
	if err != nil {
		return store.Share{}, NotFound(err, q.Dialect.NoRows, "share")
	}
	return s, nil
}

// InsertShare implements store.Tx.
func (q Queries) InsertShare(ctx context.Context, s store.Share) error {
	// ON CONFLICT DO NOTHING rather than catching the unique violation,
	// which would abort the whole transaction on Postgres.
	n, err := q.DB.Exec(ctx, `INSERT INTO preview_shares (id, sandbox_id, account_id, port, hash, note, created_by, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
		s.ID, s.SandboxID, s.AccountID, s.Port, s.Hash, s.Note, s.CreatedBy, q.timeOrNow(s.CreatedAt), q.Dialect.Time(s.ExpiresAt))
	return OneRow(n, err, "insert share "+s.ID, store.ErrConflict)
}

// RevokeShare implements store.Tx.
func (q Queries) RevokeShare(ctx context.Context, id string, at time.Time) error {
	n, err := q.DB.Exec(ctx, `UPDATE preview_shares SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1`, id, q.Dialect.Time(at))
	return OneRow(n, err, "revoke share "+id, store.ErrNotFound)
}

// MarkShareUsed implements store.Tx.
func (q Queries) MarkShareUsed(ctx context.Context, id string, at time.Time) (bool, error) {
	n, err := q.DB.Exec(ctx, `UPDATE preview_shares SET first_used_at = $2 WHERE id = $1 AND first_used_at IS NULL`, id, q.Dialect.Time(at))
	if err != nil {
		return false, fmt.Errorf("mark share %s used: %w", id, err)
	}
	return n == 1, nil
}
