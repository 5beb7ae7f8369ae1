package backend

import (
	"context"

	"github.com/sbxedge/sbx/control/store"
)

const secretCols = `account_id, name, sealed, created_at, updated_at`

func (q Queries) scanSecret(row Row) (store.Secret, error) {
	var s store.Secret
	err := row.Scan(&s.AccountID, &s.Name, &s.Sealed, q.Dialect.TimeDest(&s.CreatedAt), q.Dialect.TimeDest(&s.UpdatedAt))
	s.CreatedAt, s.UpdatedAt = s.CreatedAt.UTC(), s.UpdatedAt.UTC()
	return s, err
}

// Secrets implements store.Reader.
func (q Queries) Secrets(ctx context.Context, accountID string) ([]store.Secret, error) {
	return List(ctx, q.DB, "list secrets", q.scanSecret,
		`SELECT `+secretCols+` FROM account_secrets WHERE account_id = $1 ORDER BY name`, accountID)
}

// Secret implements store.Reader.
func (q Queries) Secret(ctx context.Context, accountID, name string) (store.Secret, error) {
	s, err := q.scanSecret(q.DB.QueryRow(ctx, `SELECT `+secretCols+` FROM account_secrets
		WHERE account_id = $1 AND name = $2`, accountID, name))
	if err != nil {
		return store.Secret{}, NotFound(err, q.Dialect.NoRows, "secret "+name)
	}
	return s, nil
}

// PutSecret implements store.Tx.
func (q Queries) PutSecret(ctx context.Context, s store.Secret) error {
	n, err := q.DB.Exec(ctx, `INSERT INTO account_secrets (`+secretCols+`) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (account_id, name) DO UPDATE SET sealed = excluded.sealed, updated_at = excluded.updated_at`,
		s.AccountID, s.Name, s.Sealed, q.timeOrNow(s.CreatedAt), q.timeOrNow(s.UpdatedAt))
	return OneRow(n, err, "put secret "+s.Name, store.ErrConflict)
}

// DeleteSecret implements store.Tx.
func (q Queries) DeleteSecret(ctx context.Context, accountID, name string) error {
	n, err := q.DB.Exec(ctx, `DELETE FROM account_secrets WHERE account_id = $1 AND name = $2`, accountID, name)
	return OneRow(n, err, "delete secret "+name, store.ErrNotFound)
}
