package postgres

import (
	"context"

	"github.com/sbxedge/sbx/control/store"
)

func (q queries) SSHCredential(ctx context.Context, fingerprint string) (store.SSHCredential, error) {
	var c store.SSHCredential
	err := q.q.QueryRow(ctx, `SELECT id, sandbox_id, account_id, fingerprint, created_at, expires_at
		FROM ssh_credentials WHERE fingerprint = $1`, fingerprint).
		Scan(&c.ID, &c.SandboxID, &c.AccountID, &c.Fingerprint, &c.CreatedAt, &c.ExpiresAt)
	if err != nil {
		return store.SSHCredential{}, notFound(err, "ssh credential")
	}
	c.CreatedAt, c.ExpiresAt = c.CreatedAt.UTC(), c.ExpiresAt.UTC()
	return c, nil
}

func (t *tx) InsertSSHCredential(ctx context.Context, c store.SSHCredential) error {
	// ON CONFLICT DO NOTHING rather than catching the unique violation,
	// which would abort the whole transaction.
	tag, err := t.q.Exec(ctx, `INSERT INTO ssh_credentials (id, sandbox_id, account_id, fingerprint, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING`,
		c.ID, c.SandboxID, c.AccountID, c.Fingerprint, orNow(c.CreatedAt), c.ExpiresAt)
	return oneRow(tag, err, "insert ssh credential "+c.ID, store.ErrConflict)
}
