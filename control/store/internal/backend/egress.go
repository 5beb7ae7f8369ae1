package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// InsertEgressDecision implements store.Tx.
func (q Queries) InsertEgressDecision(ctx context.Context, d store.EgressDecision) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO egress_log (sandbox_id, at, host, port, addr, verdict, reason, bytes_up, bytes_down)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		d.SandboxID, q.timeOrNow(d.At), d.Host, d.Port, d.Addr, d.Verdict, d.Reason, d.BytesUp, d.BytesDown)
	if err != nil {
		return fmt.Errorf("insert egress decision of %s: %w", d.SandboxID, err)
	}
	return nil
}

// PruneEgressLog implements store.Tx. Batched (limit) so one sweep
// never holds a long transaction over a large backlog.
func (q Queries) PruneEgressLog(ctx context.Context, before time.Time, limit int) (int, error) {
	n, err := q.DB.Exec(ctx, `DELETE FROM egress_log WHERE id IN (
		SELECT id FROM egress_log WHERE at < $1 ORDER BY at LIMIT $2)`, q.Dialect.Time(before), limit)
	if err != nil {
		return 0, fmt.Errorf("prune egress log: %w", err)
	}
	return int(n), nil
}

// EgressDecisions implements store.Reader.
func (q Queries) EgressDecisions(ctx context.Context, sandboxID string, beforeID int64, limit int) ([]store.EgressDecision, error) {
	d := q.Dialect
	return List(ctx, q.DB, "egress decisions", func(row Row) (store.EgressDecision, error) {
		var e store.EgressDecision
		err := row.Scan(&e.ID, &e.SandboxID, d.TimeDest(&e.At), &e.Host, &e.Port, &e.Addr, &e.Verdict, &e.Reason, &e.BytesUp, &e.BytesDown)
		e.At = e.At.UTC()
		return e, err
	}, `SELECT id, sandbox_id, at, host, port, addr, verdict, reason, bytes_up, bytes_down FROM egress_log
		WHERE sandbox_id = $1 AND ($2 = 0 OR id < $2)
		ORDER BY id DESC LIMIT $3`, sandboxID, beforeID, limit)
}

const credentialCols = `account_id, name, upstream, header, sealed, created_at, last_used_at`

func (q Queries) scanCredential(row Row) (store.Credential, error) {
	var c store.Credential
	d := q.Dialect
	err := row.Scan(&c.AccountID, &c.Name, &c.Upstream, &c.Header, &c.Sealed, d.TimeDest(&c.CreatedAt), d.NullTimeDest(&c.LastUsedAt))
	c.CreatedAt, c.LastUsedAt = c.CreatedAt.UTC(), store.UTCPtr(c.LastUsedAt)
	return c, err
}

// Credential implements store.Reader.
func (q Queries) Credential(ctx context.Context, accountID, name string) (store.Credential, error) {
	c, err := q.scanCredential(q.DB.QueryRow(ctx, `SELECT `+credentialCols+` FROM credentials WHERE account_id = $1 AND name = $2`, accountID, name))
	if err != nil {
		return store.Credential{}, NotFound(err, q.Dialect.NoRows, "credential "+name)
	}
	return c, nil
}

// Credentials implements store.Reader.
func (q Queries) Credentials(ctx context.Context, accountID string) ([]store.Credential, error) {
	return List(ctx, q.DB, "credentials", q.scanCredential,
		`SELECT `+credentialCols+` FROM credentials WHERE account_id = $1 ORDER BY name`, accountID)
}

// PutCredential implements store.Tx: a new credential, or a new
// upstream, header and secret for one of the same name.
func (q Queries) PutCredential(ctx context.Context, c store.Credential) error {
	d := q.Dialect
	_, err := q.DB.Exec(ctx, `INSERT INTO credentials (`+credentialCols+`) VALUES ($1, $2, $3, $4, $5, $6, NULL)
		ON CONFLICT (account_id, name) DO UPDATE SET upstream = excluded.upstream, header = excluded.header, sealed = excluded.sealed`,
		c.AccountID, c.Name, c.Upstream, c.Header, c.Sealed, d.Time(c.CreatedAt))
	if err != nil {
		return fmt.Errorf("put credential %s: %w", c.Name, err)
	}
	return nil
}

// DeleteCredential implements store.Tx.
func (q Queries) DeleteCredential(ctx context.Context, accountID, name string) error {
	n, err := q.DB.Exec(ctx, `DELETE FROM credentials WHERE account_id = $1 AND name = $2`, accountID, name)
	return OneRow(n, err, "delete credential "+name, store.ErrNotFound)
}

// TouchCredential implements store.Tx.
func (q Queries) TouchCredential(ctx context.Context, accountID, name string, at time.Time) error {
	_, err := q.DB.Exec(ctx, `UPDATE credentials SET last_used_at = $3 WHERE account_id = $1 AND name = $2`,
		accountID, name, q.Dialect.Time(at))
	if err != nil {
		return fmt.Errorf("touch credential %s: %w", name, err)
	}
	return nil
}
