package sqlite

import (
	"context"

	"github.com/sbxedge/sbx/control/store"
)

func (q queries) SSHCredential(ctx context.Context, fingerprint string) (store.SSHCredential, error) {
	var c store.SSHCredential
	var created, expires int64
	err := q.q.QueryRowContext(ctx, `SELECT id, sandbox_id, account_id, fingerprint, created_at, expires_at
		FROM ssh_credentials WHERE fingerprint = ?`, fingerprint).
		Scan(&c.ID, &c.SandboxID, &c.AccountID, &c.Fingerprint, &created, &expires)
	if err != nil {
		// The fingerprint is public, but it is still not worth a log line.
		return store.SSHCredential{}, notFound(err, "ssh credential")
	}
	c.CreatedAt, c.ExpiresAt = fromMicros(created), fromMicros(expires)
	return c, nil
}

func (t *tx) InsertSSHCredential(ctx context.Context, c store.SSHCredential) error {
	res, err := t.q.ExecContext(ctx, `INSERT INTO ssh_credentials (id, sandbox_id, account_id, fingerprint, created_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		c.ID, c.SandboxID, c.AccountID, c.Fingerprint, orNow(c.CreatedAt), micros(c.ExpiresAt))
	return oneRow(res, err, "insert ssh credential "+c.ID, store.ErrConflict)
}
