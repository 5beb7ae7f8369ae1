package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

const grantCols = `g.id, g.sandbox_id, g.account_id, g.project_id, g.position, g.scopes, g.hash, g.created_at, g.minted_at`

func scanGrant(row backend.Row, extra ...any) (store.GrantToken, error) {
	var g store.GrantToken
	dest := append([]any{&g.ID, &g.SandboxID, &g.AccountID, &g.ProjectID, &g.Position, &g.Scopes, &g.Hash, &g.CreatedAt, &g.MintedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.GrantToken{}, err
	}
	g.CreatedAt, g.MintedAt = g.CreatedAt.UTC(), backend.UTCPtr(g.MintedAt)
	if len(g.Hash) == 0 {
		g.Hash = nil
	}
	return g, nil
}

func (q queries) GrantTokens(ctx context.Context, sandboxID string) ([]store.GrantToken, error) {
	return list(ctx, q.q, "grants of "+sandboxID, func(r backend.Row) (store.GrantToken, error) { return scanGrant(r) }, `SELECT `+grantCols+` FROM grant_tokens g WHERE g.sandbox_id = $1 ORDER BY g.position`, sandboxID)
}

func (q queries) GrantTokenByHash(ctx context.Context, hash []byte) (store.GrantToken, error) {
	if len(hash) == 0 {
		return store.GrantToken{}, fmt.Errorf("grant token by empty hash: %w", store.ErrNotFound)
	}
	g, err := scanGrant(q.q.QueryRow(ctx, `SELECT `+grantCols+` FROM grant_tokens g WHERE g.hash = $1`, hash))
	if err != nil {
		return store.GrantToken{}, notFound(err, "grant token by hash")
	}
	return g, nil
}

// scanAuditEntry scans one row of Audit.
func scanAuditEntry(r backend.Row) (store.AuditEntry, error) {
	var a store.AuditEntry
	err := r.Scan(&a.ID, &a.AccountID, &a.ProjectID, &a.SandboxID, &a.Caller, &a.Action, &a.Scopes, &a.Message, &a.At)
	a.At = a.At.UTC()
	if len(a.Scopes) == 0 {
		a.Scopes = nil
	}
	return a, err
}

func (q queries) Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	limit := backend.Limit(f.Limit)
	return list(ctx, q.q, "audit of "+f.AccountID, scanAuditEntry, `SELECT id, account_id, project_id, sandbox_id, caller, action, scopes, message, at
		FROM audit_log
		WHERE account_id = $1 AND ($2 = '' OR project_id = $2) AND ($3 = '' OR sandbox_id = $3)
		  AND ($4 = 0 OR id < $4)
		ORDER BY id DESC LIMIT $5`, f.AccountID, f.ProjectID, f.SandboxID, f.Before, limit)
}

func (q queries) LiveCounts(ctx context.Context) ([]store.LiveCount, error) {
	return list(ctx, q.q, "live counts", backend.ScanLiveCount, `SELECT account_id, platform, state, count(*) FROM sandboxes
		WHERE state = ANY($1) GROUP BY account_id, platform, state ORDER BY account_id, platform, state`,
		append(liveStates(), string(store.StateSuspended)))
}

func (t *tx) InsertGrantToken(ctx context.Context, g store.GrantToken) error {
	scopes := g.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	tag, err := t.q.Exec(ctx, `INSERT INTO grant_tokens (id, sandbox_id, account_id, project_id, position, scopes, hash, created_at, minted_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING`,
		g.ID, g.SandboxID, g.AccountID, g.ProjectID, g.Position, scopes, nilIfEmpty(g.Hash), orNow(g.CreatedAt), g.MintedAt)
	return oneRow(tag, err, "insert grant "+g.ID, store.ErrConflict)
}

func (t *tx) SetGrantTokenHash(ctx context.Context, id string, hash []byte, at time.Time) error {
	if len(hash) == 0 {
		return errors.New("set grant token hash: empty hash")
	}
	tag, err := t.q.Exec(ctx, `UPDATE grant_tokens SET hash = $2, minted_at = $3 WHERE id = $1`, id, hash, at)
	if err != nil {
		return conflict(err, "set hash of grant "+id)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("set hash of grant %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *tx) InsertAudit(ctx context.Context, a store.AuditEntry) error {
	scopes := a.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	_, err := t.q.Exec(ctx, `INSERT INTO audit_log (account_id, project_id, sandbox_id, caller, action, scopes, message, at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
		a.AccountID, a.ProjectID, a.SandboxID, a.Caller, a.Action, scopes, a.Message, orNow(a.At))
	if err != nil {
		return fmt.Errorf("insert %s audit entry: %w", a.Action, err)
	}
	return nil
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func (t *tx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	tag, err := t.q.Exec(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1`, id, at)
	return oneRow(tag, err, "revoke token "+id, store.ErrNotFound)
}
