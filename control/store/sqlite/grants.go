package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
)

const grantCols = `id, sandbox_id, account_id, project_id, position, scopes, hash, created_at, minted_at`

func scanGrant(row scanner) (store.GrantToken, error) {
	var g store.GrantToken
	var scopes string
	var created int64
	var minted sql.NullInt64
	if err := row.Scan(&g.ID, &g.SandboxID, &g.AccountID, &g.ProjectID, &g.Position, &scopes, &g.Hash, &created, &minted); err != nil {
		return store.GrantToken{}, err
	}
	if err := json.Unmarshal([]byte(scopes), &g.Scopes); err != nil {
		return store.GrantToken{}, fmt.Errorf("decode scopes of grant %s: %w", g.ID, err)
	}
	if len(g.Hash) == 0 {
		g.Hash = nil
	}
	g.CreatedAt, g.MintedAt = fromMicros(created), fromNullMicros(minted)
	return g, nil
}

func (q queries) GrantTokens(ctx context.Context, sandboxID string) ([]store.GrantToken, error) {
	return list(ctx, q.q, "grants of "+sandboxID, scanGrant, `SELECT `+grantCols+` FROM grant_tokens WHERE sandbox_id = ? ORDER BY position`, sandboxID)
}

func (q queries) GrantTokenByHash(ctx context.Context, hash []byte) (store.GrantToken, error) {
	if len(hash) == 0 {
		return store.GrantToken{}, fmt.Errorf("grant token by empty hash: %w", store.ErrNotFound)
	}
	g, err := scanGrant(q.q.QueryRowContext(ctx, `SELECT `+grantCols+` FROM grant_tokens WHERE hash = ?`, hash))
	if err != nil {
		return store.GrantToken{}, notFound(err, "grant token by hash")
	}
	return g, nil
}

// scanAuditEntry scans one row of Audit.
func scanAuditEntry(r scanner) (store.AuditEntry, error) {
	var a store.AuditEntry
	var scopes string
	var at int64
	if err := r.Scan(&a.ID, &a.AccountID, &a.ProjectID, &a.SandboxID, &a.Caller, &a.Action, &scopes, &a.Message, &at); err != nil {
		return a, err
	}
	if err := json.Unmarshal([]byte(scopes), &a.Scopes); err != nil {
		return a, fmt.Errorf("decode scopes of audit entry %d: %w", a.ID, err)
	}
	if len(a.Scopes) == 0 {
		a.Scopes = nil
	}
	a.At = fromMicros(at)
	return a, nil
}

func (q queries) Audit(ctx context.Context, f store.AuditFilter) ([]store.AuditEntry, error) {
	limit := backend.Limit(f.Limit)
	return list(ctx, q.q, "audit of "+f.AccountID, scanAuditEntry, `SELECT id, account_id, project_id, sandbox_id, caller, action, scopes, message, at
		FROM audit_log
		WHERE account_id = ?1 AND (?2 = '' OR project_id = ?2) AND (?3 = '' OR sandbox_id = ?3)
		  AND (?4 = 0 OR id < ?4)
		ORDER BY id DESC LIMIT ?5`, f.AccountID, f.ProjectID, f.SandboxID, f.Before, limit)
}

func (q queries) LiveCounts(ctx context.Context) ([]store.LiveCount, error) {
	in, args := inList(append(append([]store.State{}, store.LiveStates...), store.StateSuspended))
	return list(ctx, q.q, "live counts", backend.ScanLiveCount, `SELECT account_id, platform, state, count(*) FROM sandboxes
		WHERE state IN `+in+` GROUP BY account_id, platform, state ORDER BY account_id, platform, state`, args...)
}

func jsonList(v []string) string {
	if v == nil {
		v = []string{}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func (t *tx) InsertGrantToken(ctx context.Context, g store.GrantToken) error {
	var hash any
	if len(g.Hash) > 0 {
		hash = g.Hash
	}
	res, err := t.q.ExecContext(ctx, `INSERT INTO grant_tokens (`+grantCols+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		g.ID, g.SandboxID, g.AccountID, g.ProjectID, g.Position, jsonList(g.Scopes), hash, orNow(g.CreatedAt), nullMicros(g.MintedAt))
	return oneRow(res, err, "insert grant "+g.ID, store.ErrConflict)
}

func (t *tx) SetGrantTokenHash(ctx context.Context, id string, hash []byte, at time.Time) error {
	if len(hash) == 0 {
		return errors.New("set grant token hash: empty hash")
	}
	res, err := t.q.ExecContext(ctx, `UPDATE grant_tokens SET hash = ?, minted_at = ? WHERE id = ?`, hash, micros(at), id)
	if err != nil {
		return conflict(err, "set hash of grant "+id)
	}
	if affected(res) == 0 {
		return fmt.Errorf("set hash of grant %s: %w", id, store.ErrNotFound)
	}
	return nil
}

func (t *tx) InsertAudit(ctx context.Context, a store.AuditEntry) error {
	_, err := t.q.ExecContext(ctx, `INSERT INTO audit_log (account_id, project_id, sandbox_id, caller, action, scopes, message, at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
		a.AccountID, a.ProjectID, a.SandboxID, a.Caller, a.Action, jsonList(a.Scopes), a.Message, orNow(a.At))
	if err != nil {
		return fmt.Errorf("insert %s audit entry: %w", a.Action, err)
	}
	return nil
}

func (t *tx) RevokeToken(ctx context.Context, id string, at time.Time) error {
	res, err := t.q.ExecContext(ctx, `UPDATE tokens SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`, micros(at), id)
	return oneRow(res, err, "revoke token "+id, store.ErrNotFound)
}
