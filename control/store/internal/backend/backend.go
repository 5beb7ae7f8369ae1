// Package backend is what the Postgres and SQLite stores share: the column
// lists their scanners read in this order, the queries without placeholders
// or dialect-specific functions, the page size, scanners for rows both
// store alike, and Queries, the statements written once (with $n
// placeholders) that run on either backend through its DB and Dialect:
// SQLite renumbers the placeholders and binds and scans times as Unix
// microseconds. A statement using a dialect's own SQL (SKIP LOCKED,
// advisory locks, unixepoch) stays in its backend.
package backend

import (
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// Row is a result row of either backend: pgx.Row, pgx.CollectableRow,
// *sql.Row or *sql.Rows.
type Row interface{ Scan(dest ...any) error }

// NotFound wraps a lookup's err with what, as store.ErrNotFound when err
// is noRows, the driver's "no row" (pgx.ErrNoRows, sql.ErrNoRows).
func NotFound(err, noRows error, what string) error {
	if errors.Is(err, noRows) {
		return fmt.Errorf("%s: %w", what, store.ErrNotFound)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// ScanProfile scans one row of ProfileCols.
func ScanProfile(row Row) (store.Profile, error) {
	var p store.Profile
	err := row.Scan(&p.Name, &p.Platform, &p.CPU, &p.MemoryMB, &p.DiskGB, &p.Image)
	return p, err
}

// ScanLiveCount scans one row of a live count: account_id, platform,
// state, count(*).
func ScanLiveCount(r Row) (store.LiveCount, error) {
	var c store.LiveCount
	var state string
	err := r.Scan(&c.AccountID, &c.Platform, &state, &c.Count)
	c.State = store.State(state)
	return c, err
}

// Column lists, in the order each backend's scanner reads them.
const (
	AccountCols = `a.id, a.name, a.sandboxes_enabled, a.concurrent_limit, a.allowed_platforms, a.monthly_minutes, a.snapshot_limit, a.created_at`

	ProfileCols = `name, platform, cpu, memory_mb, disk_gb, image`

	SandboxCols = `id, account_id, project_id, profile, platform, state, created_at, deadline_at,
	ready_at, suspended_at, terminated_at, end_reason, endpoint, ssh_user, workspace, host_key,
	grants, idempotency_key, request_hash, consumer, lease_holder, lease_until, restore_attempts,
	forward_endpoint, name, labels, no_wake_on_traffic,
	from_snapshot, restore_snapshot, recreated_from, recreated_as, create_request,
	env, secret_refs, idle_timeout_seconds, ignore_busy, retention_days, retention_warned_at,
	network, credentials`

	PreviewPortCols = `sandbox_id, account_id, port, label, access, host_policy, created_at, name`

	ShareCols = `id, sandbox_id, account_id, port, hash, note, created_by, created_at, expires_at, first_used_at, revoked_at`
)

// IdleCandidates lists the ready sandboxes with an open compute session,
// oldest session first, with their account's idle timeout (0: the default),
// their own (0: the account's) and whether running work keeps them awake.
const IdleCandidates = `SELECT s.id, s.account_id, ss.started_at, coalesce(a.idle_timeout_seconds, 0),
		s.idle_timeout_seconds, s.ignore_busy
		FROM sandboxes s
		JOIN sandbox_sessions ss ON ss.sandbox_id = s.id AND ss.kind = 'compute' AND ss.ended_at IS NULL
		JOIN accounts a ON a.id = s.account_id
		WHERE s.state = 'ready'
		ORDER BY ss.started_at`

// DefaultLimit is the page size of a list asked for with no limit.
const DefaultLimit = 100

// Limit is n, or DefaultLimit when n is not positive.
func Limit(n int) int {
	if n <= 0 {
		return DefaultLimit
	}
	return n
}
