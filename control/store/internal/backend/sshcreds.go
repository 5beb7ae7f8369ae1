package backend

import (
	"context"

	"github.com/sbxedge/sbx/control/store"
)

// SSHCredential implements store.Reader.
func (q Queries) SSHCredential(ctx context.Context, fingerprint string) (store.SSHCredential, error) {
	var c store.SSHCredential
	err := q.DB.QueryRow(ctx, `SELECT c.id, c.sandbox_id, c.account_id, c.fingerprint, c.token_id,
			c.created_at, c.expires_at, t.revoked_at IS NOT NULL
		FROM ssh_credentials c LEFT JOIN tokens t ON t.id = c.token_id
		WHERE c.fingerprint = $1`, fingerprint).
		Scan(&c.ID, &c.SandboxID, &c.AccountID, &c.Fingerprint, &c.TokenID,
			q.Dialect.TimeDest(&c.CreatedAt), q.Dialect.TimeDest(&c.ExpiresAt), &c.TokenRevoked)
	if err != nil {
		// The fingerprint is public, but it is still not worth a log line.
		return store.SSHCredential{}, NotFound(err, q.Dialect.NoRows, "ssh credential")
	}
	c.CreatedAt, c.ExpiresAt = c.CreatedAt.UTC(), c.ExpiresAt.UTC()
	return c, nil
}

// InsertSSHCredential implements store.Tx.
func (q Queries) InsertSSHCredential(ctx context.Context, c store.SSHCredential) error {
	// ON CONFLICT DO NOTHING rather than catching the unique violation,
	// which would abort the whole transaction on Postgres.
	n, err := q.DB.Exec(ctx, `INSERT INTO ssh_credentials (id, sandbox_id, account_id, fingerprint, token_id, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`,
		c.ID, c.SandboxID, c.AccountID, c.Fingerprint, c.TokenID, q.timeOrNow(c.CreatedAt), q.Dialect.Time(c.ExpiresAt))
	return OneRow(n, err, "insert ssh credential "+c.ID, store.ErrConflict)
}
