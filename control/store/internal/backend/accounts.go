package backend

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// scanAccount scans one row of AccountCols, then extra.
func (q Queries) scanAccount(row Row, extra ...any) (store.Account, error) {
	var a store.Account
	dest := append([]any{&a.ID, &a.Name, &a.SandboxesEnabled, &a.ConcurrentLimit, q.Dialect.StringsDest(&a.AllowedPlatforms),
		&a.MonthlyMinutes, &a.SnapshotLimit, q.Dialect.TimeDest(&a.CreatedAt)}, extra...)
	if err := row.Scan(dest...); err != nil {
		return store.Account{}, err
	}
	if len(a.AllowedPlatforms) == 0 {
		a.AllowedPlatforms = nil
	}
	a.CreatedAt = a.CreatedAt.UTC()
	return a, nil
}

// AccountByTokenHash implements store.Reader.
func (q Queries) AccountByTokenHash(ctx context.Context, hash []byte, now time.Time) (store.Account, store.Token, error) {
	var t store.Token
	var kind string
	d := q.Dialect
	a, err := q.scanAccount(q.DB.QueryRow(ctx, `SELECT `+AccountCols+`,
			t.id, t.account_id, t.kind, t.name, t.hash, t.created_at, t.expires_at, t.revoked_at
		FROM tokens t JOIN accounts a ON a.id = t.account_id
		WHERE t.hash = $1 AND t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > $2)`, hash, d.Time(now)),
		&t.ID, &t.AccountID, &kind, &t.Name, &t.Hash, d.TimeDest(&t.CreatedAt), d.NullTimeDest(&t.ExpiresAt), d.NullTimeDest(&t.RevokedAt))
	if err != nil {
		return store.Account{}, store.Token{}, NotFound(err, d.NoRows, "token by hash")
	}
	t.Kind = store.TokenKind(kind)
	t.CreatedAt = t.CreatedAt.UTC()
	t.ExpiresAt, t.RevokedAt = store.UTCPtr(t.ExpiresAt), store.UTCPtr(t.RevokedAt)
	return a, t, nil
}

// Account implements store.Reader.
func (q Queries) Account(ctx context.Context, id string) (store.Account, error) {
	a, err := q.scanAccount(q.DB.QueryRow(ctx, `SELECT `+AccountCols+` FROM accounts a WHERE a.id = $1`, id))
	if err != nil {
		return store.Account{}, NotFound(err, q.Dialect.NoRows, "account "+id)
	}
	return a, nil
}

// AccountHoldingSQL reads account $1 and how many of its sandboxes hold
// a pod (store.PodStates), for ScanAccountHolding.
const AccountHoldingSQL = `SELECT ` + AccountCols + `, ` + holdingSQL + `
	FROM accounts a WHERE a.id = $1`

// holdingSQL is the account's count of sandboxes in store.PodStates: one
// row that the migrations' triggers on sandboxes keep (a count over the
// account's sandboxes took milliseconds at thousands, with every other
// create in the account waiting on the account lock meanwhile). An
// account that never had one has no row.
const holdingSQL = `coalesce((SELECT l.n FROM account_live_sandboxes l WHERE l.account_id = a.id), 0)`

// HoldingPodsSQL is the count alone, for account $1.
const HoldingPodsSQL = `SELECT coalesce((SELECT n FROM account_live_sandboxes WHERE account_id = $1), 0)`

// CountHoldingPods reads account accountID's count of sandboxes in
// store.PodStates, as this transaction sees it.
func (q Queries) CountHoldingPods(ctx context.Context, accountID string) (int, error) {
	var n int
	if err := q.DB.QueryRow(ctx, HoldingPodsSQL, accountID).Scan(&n); err != nil {
		return 0, fmt.Errorf("count live sandboxes of %s: %w", accountID, err)
	}
	return n, nil
}

// ScanAccountHolding scans a row of AccountHoldingSQL.
func (q Queries) ScanAccountHolding(row Row, id string) (store.Account, int, error) {
	var n int
	a, err := q.scanAccount(row, &n)
	if err != nil {
		return store.Account{}, 0, NotFound(err, q.Dialect.NoRows, "account "+id)
	}
	return a, n, nil
}

// Accounts implements store.Reader.
func (q Queries) Accounts(ctx context.Context) ([]store.Account, error) {
	return List(ctx, q.DB, "list accounts", func(r Row) (store.Account, error) { return q.scanAccount(r) },
		`SELECT `+AccountCols+` FROM accounts a ORDER BY a.id`)
}

// UpsertAccount implements store.Tx.
func (q Queries) UpsertAccount(ctx context.Context, a store.Account) error {
	platforms := a.AllowedPlatforms
	if platforms == nil {
		platforms = []string{}
	}
	// created_at is kept from the first insert.
	_, err := q.DB.Exec(ctx, `INSERT INTO accounts (id, name, sandboxes_enabled, concurrent_limit, allowed_platforms, monthly_minutes, snapshot_limit, created_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name, sandboxes_enabled = excluded.sandboxes_enabled,
			concurrent_limit = excluded.concurrent_limit, allowed_platforms = excluded.allowed_platforms,
			monthly_minutes = excluded.monthly_minutes, snapshot_limit = excluded.snapshot_limit`,
		a.ID, a.Name, a.SandboxesEnabled, a.ConcurrentLimit, q.Dialect.Strings(platforms), a.MonthlyMinutes, a.SnapshotLimit, q.timeOrNow(a.CreatedAt))
	if err != nil {
		return q.Dialect.Conflict(err, "upsert account "+a.ID)
	}
	return nil
}

func (q Queries) scanRevokedToken(r Row) (store.Token, error) {
	var t store.Token
	err := r.Scan(&t.ID, &t.AccountID, q.Dialect.NullTimeDest(&t.RevokedAt))
	t.RevokedAt = store.UTCPtr(t.RevokedAt)
	return t, err
}

// TokensRevokedSince implements store.Reader.
func (q Queries) TokensRevokedSince(ctx context.Context, since time.Time) ([]store.Token, error) {
	return List(ctx, q.DB, fmt.Sprintf("tokens revoked since %s", since), q.scanRevokedToken, `SELECT id, account_id, revoked_at FROM tokens
		WHERE revoked_at > $1 ORDER BY revoked_at, id`, q.Dialect.Time(since))
}

// InsertToken implements store.Tx.
func (q Queries) InsertToken(ctx context.Context, tk store.Token) error {
	n, err := q.DB.Exec(ctx, `INSERT INTO tokens (id, account_id, kind, name, hash, created_at, expires_at, revoked_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING`,
		tk.ID, tk.AccountID, string(tk.Kind), tk.Name, tk.Hash, q.timeOrNow(tk.CreatedAt), q.Dialect.NullTime(tk.ExpiresAt), q.Dialect.NullTime(tk.RevokedAt))
	return OneRow(n, err, "insert token "+tk.ID, store.ErrConflict)
}

// Project implements store.Reader.
func (q Queries) Project(ctx context.Context, id string) (store.Project, error) {
	var p store.Project
	err := q.DB.QueryRow(ctx, `SELECT id, account_id, name, created_at FROM projects WHERE id = $1`, id).
		Scan(&p.ID, &p.AccountID, &p.Name, q.Dialect.TimeDest(&p.CreatedAt))
	if err != nil {
		return store.Project{}, NotFound(err, q.Dialect.NoRows, "project "+id)
	}
	p.CreatedAt = p.CreatedAt.UTC()
	return p, nil
}

// UpsertProject implements store.Tx.
func (q Queries) UpsertProject(ctx context.Context, p store.Project) error {
	// A project never moves between accounts: the guarded update touches
	// no row then, which reads as a conflict.
	n, err := q.DB.Exec(ctx, `INSERT INTO projects (id, account_id, name, created_at) VALUES ($1, $2, $3, $4)
		ON CONFLICT (id) DO UPDATE SET name = excluded.name
		WHERE projects.account_id = excluded.account_id`,
		p.ID, p.AccountID, p.Name, q.timeOrNow(p.CreatedAt))
	if err != nil {
		return q.Dialect.Conflict(err, "upsert project "+p.ID)
	}
	if n == 0 {
		return fmt.Errorf("upsert project %s: owned by another account: %w", p.ID, store.ErrConflict)
	}
	return nil
}

// Profile implements store.Reader.
func (q Queries) Profile(ctx context.Context, name string) (store.Profile, error) {
	p, err := ScanProfile(q.DB.QueryRow(ctx, `SELECT `+ProfileCols+` FROM profiles WHERE name = $1`, name))
	if err != nil {
		return store.Profile{}, NotFound(err, q.Dialect.NoRows, "profile "+name)
	}
	return p, nil
}

// Profiles implements store.Reader.
func (q Queries) Profiles(ctx context.Context) ([]store.Profile, error) {
	return List(ctx, q.DB, "list profiles", ScanProfile, `SELECT `+ProfileCols+` FROM profiles ORDER BY name`)
}

// UpsertProfile implements store.Tx.
func (q Queries) UpsertProfile(ctx context.Context, p store.Profile) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO profiles (`+ProfileCols+`) VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT (name) DO UPDATE SET platform = excluded.platform, cpu = excluded.cpu,
			memory_mb = excluded.memory_mb, disk_gb = excluded.disk_gb, image = excluded.image`,
		p.Name, p.Platform, p.CPU, p.MemoryMB, p.DiskGB, p.Image)
	if err != nil {
		return fmt.Errorf("upsert profile %s: %w", p.Name, err)
	}
	return nil
}

// AccountIdleTimeout implements store.Reader; 0 when the account has none.
func (q Queries) AccountIdleTimeout(ctx context.Context, accountID string) (time.Duration, error) {
	var secs *int64
	err := q.DB.QueryRow(ctx, `SELECT idle_timeout_seconds FROM accounts WHERE id = $1`, accountID).Scan(&secs)
	if err != nil {
		return 0, NotFound(err, q.Dialect.NoRows, "account")
	}
	if secs == nil {
		return 0, nil
	}
	return time.Duration(*secs) * time.Second, nil
}

// SetAccountIdleTimeout implements store.Tx; a d under a second clears it.
func (q Queries) SetAccountIdleTimeout(ctx context.Context, accountID string, d time.Duration) error {
	var secs *int64
	if s := int64(d / time.Second); s > 0 {
		secs = &s
	}
	n, err := q.DB.Exec(ctx, `UPDATE accounts SET idle_timeout_seconds = $2 WHERE id = $1`, accountID, secs)
	return OneRow(n, err, "set idle timeout of "+accountID, store.ErrNotFound)
}
