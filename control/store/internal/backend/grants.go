package backend

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

const grantCols = `g.id, g.sandbox_id, g.account_id, g.project_id, g.position, g.scopes, g.hash, g.created_at, g.minted_at`

func (q Queries) scanGrant(row Row) (store.GrantToken, error) {
	var g store.GrantToken
	d := q.Dialect
	if err := row.Scan(&g.ID, &g.SandboxID, &g.AccountID, &g.ProjectID, &g.Position, d.StringsDest(&g.Scopes), &g.Hash,
		d.TimeDest(&g.CreatedAt), d.NullTimeDest(&g.MintedAt)); err != nil {
		return store.GrantToken{}, err
	}
	g.CreatedAt, g.MintedAt = g.CreatedAt.UTC(), store.UTCPtr(g.MintedAt)
	if len(g.Hash) == 0 {
		g.Hash = nil
	}
	return g, nil
}

// GrantTokens implements store.Reader.
func (q Queries) GrantTokens(ctx context.Context, sandboxID string) ([]store.GrantToken, error) {
	return List(ctx, q.DB, "grants of "+sandboxID, q.scanGrant,
		`SELECT `+grantCols+` FROM grant_tokens g WHERE g.sandbox_id = $1 ORDER BY g.position`, sandboxID)
}

// GrantTokenByHash implements store.Reader.
func (q Queries) GrantTokenByHash(ctx context.Context, hash []byte) (store.GrantToken, error) {
	if len(hash) == 0 {
		return store.GrantToken{}, fmt.Errorf("grant token by empty hash: %w", store.ErrNotFound)
	}
	g, err := q.scanGrant(q.DB.QueryRow(ctx, `SELECT `+grantCols+` FROM grant_tokens g WHERE g.hash = $1`, hash))
	if err != nil {
		return store.GrantToken{}, NotFound(err, q.Dialect.NoRows, "grant token by hash")
	}
	return g, nil
}

func (q Queries) scanAuditEntry(r Row) (store.AuditEntry, error) {
	var a store.AuditEntry
	err := r.Scan(&a.ID, &a.AccountID, &a.ProjectID, &a.SandboxID, &a.Caller, &a.Action,
		q.Dialect.StringsDest(&a.Scopes), &a.Message, q.Dialect.TimeDest(&a.At))
	a.At = a.At.UTC()
	if len(a.Scopes) == 0 {
		a.Scopes = nil
	}
	return a, err
}

// Audit implements store.Reader.
func (q Queries) Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	return List(ctx, q.DB, "audit of "+f.AccountID, q.scanAuditEntry, `SELECT id, account_id, project_id, sandbox_id, caller, action, scopes, message, at
		FROM audit_log
		WHERE account_id = $1 AND ($2 = '' OR project_id = $2) AND ($3 = '' OR sandbox_id = $3)
		  AND ($4 = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`, f.AccountID, f.ProjectID, f.SandboxID, f.Before, Limit(f.Limit))
}

// strings binds v, an empty list for nil: the list columns are NOT NULL.
func (q Queries) strings(v []string) any {
	if v == nil {
		v = []string{}
	}
	return q.Dialect.Strings(v)
}

// InsertGrantToken implements store.Tx; an empty hash is stored as NULL.
func (q Queries) InsertGrantToken(ctx context.Context, g store.GrantToken) error {
	var hash any
	if len(g.Hash) > 0 {
		hash = g.Hash
	}
	n, err := q.DB.Exec(ctx, `INSERT INTO grant_tokens (id, sandbox_id, account_id, project_id, position, scopes, hash, created_at, minted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
		g.ID, g.SandboxID, g.AccountID, g.ProjectID, g.Position, q.strings(g.Scopes), hash, q.timeOrNow(g.CreatedAt), q.Dialect.NullTime(g.MintedAt))
	return OneRow(n, err, "insert grant "+g.ID, store.ErrConflict)
}

// SetGrantTokenHash implements store.Tx.
func (q Queries) SetGrantTokenHash(ctx context.Context, id string, hash []byte, at time.Time) error {
	if len(hash) == 0 {
		return errors.New("set grant token hash: empty hash")
	}
	n, err := q.DB.Exec(ctx, `UPDATE grant_tokens SET hash = $2, minted_at = $3 WHERE id = $1`, id, hash, q.Dialect.Time(at))
	if err != nil {
		return q.Dialect.Conflict(err, "set hash of grant "+id)
	}
	if n == 0 {
		return fmt.Errorf("set hash of grant %s: %w", id, store.ErrNotFound)
	}
	return nil
}

// InsertAudit implements store.Tx.
func (q Queries) InsertAudit(ctx context.Context, a store.AuditEntry) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO audit_log (account_id, project_id, sandbox_id, caller, action, scopes, message, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		a.AccountID, a.ProjectID, a.SandboxID, a.Caller, a.Action, q.strings(a.Scopes), a.Message, q.timeOrNow(a.At))
	if err != nil {
		return fmt.Errorf("insert %s audit entry: %w", a.Action, err)
	}
	return nil
}

// RevokeToken implements store.Tx.
func (q Queries) RevokeToken(ctx context.Context, id string, at time.Time) error {
	n, err := q.DB.Exec(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1`, id, q.Dialect.Time(at))
	return OneRow(n, err, "revoke token "+id, store.ErrNotFound)
}
