package backend

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// ScanSandbox scans one row of SandboxCols. Grants and consumer are read
// as bytes: Postgres's jsonb and SQLite's text both scan into them.
func (q Queries) ScanSandbox(row Row) (store.Sandbox, error) {
	var sb store.Sandbox
	var state string
	var grants, consumer, labels, createReq, env, secrets []byte
	var idleSecs int64
	var network, creds string
	d := q.Dialect
	err := row.Scan(&sb.ID, &sb.AccountID, &sb.ProjectID, &sb.Profile, &sb.Platform, &state,
		d.TimeDest(&sb.CreatedAt), d.TimeDest(&sb.DeadlineAt), d.NullTimeDest(&sb.ReadyAt), d.NullTimeDest(&sb.SuspendedAt), d.NullTimeDest(&sb.TerminatedAt),
		&sb.EndReason, &sb.Endpoint, &sb.SSHUser, &sb.Workspace, &sb.HostKey,
		&grants, &sb.IdempotencyKey, &sb.RequestHash, &consumer,
		&sb.LeaseHolder, d.NullTimeDest(&sb.LeaseUntil), &sb.RestoreAttempts,
		&sb.ForwardEndpoint, &sb.Name, &labels, &sb.NoWakeOnTraffic,
		&sb.FromSnapshot, &sb.RestoreSnapshot, &sb.RecreatedFrom, &sb.RecreatedAs, &createReq,
		&env, &secrets, &idleSecs, &sb.IgnoreBusy, &sb.RetentionDays, d.NullTimeDest(&sb.RetentionWarnedAt),
		&network, &creds)
	if err != nil {
		return store.Sandbox{}, err
	}
	sb.IdleTimeout = time.Duration(idleSecs) * time.Second
	sb.RetentionWarnedAt = store.UTCPtr(sb.RetentionWarnedAt)
	if err := json.Unmarshal(env, &sb.Env); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode env of sandbox %s: %w", sb.ID, err)
	}
	if len(sb.Env) == 0 {
		sb.Env = nil
	}
	if err := json.Unmarshal(secrets, &sb.Secrets); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode secrets of sandbox %s: %w", sb.ID, err)
	}
	if len(sb.Secrets) == 0 {
		sb.Secrets = nil
	}
	if creds != "" {
		if err := json.Unmarshal([]byte(creds), &sb.Credentials); err != nil {
			return store.Sandbox{}, fmt.Errorf("decode credentials of sandbox %s: %w", sb.ID, err)
		}
	}
	if network != "" {
		sb.Network = new(egresspolicy.Spec)
		if err := json.Unmarshal([]byte(network), sb.Network); err != nil {
			return store.Sandbox{}, fmt.Errorf("decode network of sandbox %s: %w", sb.ID, err)
		}
	}
	if err := json.Unmarshal(labels, &sb.Labels); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode labels of sandbox %s: %w", sb.ID, err)
	}
	if len(sb.Labels) == 0 {
		sb.Labels = nil
	}
	if string(createReq) != "{}" {
		sb.CreateRequest = createReq
	}
	sb.State = store.State(state)
	sb.CreatedAt, sb.DeadlineAt = sb.CreatedAt.UTC(), sb.DeadlineAt.UTC()
	sb.ReadyAt, sb.SuspendedAt, sb.TerminatedAt = store.UTCPtr(sb.ReadyAt), store.UTCPtr(sb.SuspendedAt), store.UTCPtr(sb.TerminatedAt)
	sb.LeaseUntil = store.UTCPtr(sb.LeaseUntil)
	if err := json.Unmarshal(grants, &sb.Grants); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode grants of sandbox %s: %w", sb.ID, err)
	}
	if len(sb.Grants) == 0 {
		sb.Grants = nil
	}
	if err := json.Unmarshal(consumer, &sb.Consumer); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode consumer of sandbox %s: %w", sb.ID, err)
	}
	return sb, nil
}

// Sandbox implements store.Reader.
func (q Queries) Sandbox(ctx context.Context, id string) (store.Sandbox, error) {
	sb, err := q.ScanSandbox(q.DB.QueryRow(ctx, `SELECT `+SandboxCols+` FROM sandboxes WHERE id = $1`, id))
	if err != nil {
		return store.Sandbox{}, NotFound(err, q.Dialect.NoRows, "sandbox "+id)
	}
	return sb, nil
}

// SandboxByIdempotencyKey implements store.Reader.
func (q Queries) SandboxByIdempotencyKey(ctx context.Context, accountID, key string) (store.Sandbox, error) {
	if key == "" {
		return store.Sandbox{}, fmt.Errorf("sandbox by empty idempotency key: %w", store.ErrNotFound)
	}
	sb, err := q.ScanSandbox(q.DB.QueryRow(ctx, `SELECT `+SandboxCols+` FROM sandboxes
		WHERE account_id = $1 AND idempotency_key = $2`, accountID, key))
	if err != nil {
		return store.Sandbox{}, NotFound(err, q.Dialect.NoRows, "sandbox by idempotency key")
	}
	return sb, nil
}

// SandboxByName implements store.Reader.
func (q Queries) SandboxByName(ctx context.Context, accountID, name string) (store.Sandbox, error) {
	if name == "" {
		return store.Sandbox{}, fmt.Errorf("sandbox by empty name: %w", store.ErrNotFound)
	}
	sb, err := q.ScanSandbox(q.DB.QueryRow(ctx, `SELECT `+SandboxCols+` FROM sandboxes
		WHERE account_id = $1 AND name = $2 AND state NOT IN ('terminating', 'terminated', 'failed')`, accountID, name))
	if err != nil {
		return store.Sandbox{}, NotFound(err, q.Dialect.NoRows, "sandbox named "+name)
	}
	return sb, nil
}

// StuckSandboxes implements store.Reader. state_since is written by
// InsertSandbox and by every UpdateSandbox that changes the state, on the
// wall clock: it measures how long a job has been at it, not billing.
func (q Queries) StuckSandboxes(ctx context.Context, before time.Time, states ...store.State) ([]store.Sandbox, error) {
	var out []store.Sandbox
	for _, st := range states {
		list, err := List(ctx, q.DB, "stuck sandboxes", q.ScanSandbox, `SELECT `+SandboxCols+` FROM sandboxes
			WHERE state = $1 AND state_since < $2 ORDER BY created_at, id`, string(st), q.Dialect.Time(before))
		if err != nil {
			return nil, err
		}
		out = append(out, list...)
	}
	return out, nil
}

// ExpiredSandboxes implements store.Reader.
func (q Queries) ExpiredSandboxes(ctx context.Context, now time.Time, maxLifetime time.Duration, limit int) ([]store.Sandbox, error) {
	return List(ctx, q.DB, "expired sandboxes", q.ScanSandbox, `SELECT `+SandboxCols+` FROM sandboxes
		WHERE deadline_at < $1
		  AND (state IN ('pending', 'ready') OR (state = 'suspended' AND created_at <= $2))
		ORDER BY deadline_at, id LIMIT $3`, q.Dialect.Time(now), q.Dialect.Time(now.Add(-maxLifetime)), Limit(limit))
}

// InsertSandbox implements store.Tx. It inserts with ON CONFLICT DO
// NOTHING and reports store.ErrConflict from the row count, so that the
// caller can still read the existing row in the same transaction.
func (q Queries) InsertSandbox(ctx context.Context, sb store.Sandbox) error {
	d := q.Dialect
	n, err := q.DB.Exec(ctx, `INSERT INTO sandboxes (`+SandboxCols+`, state_since)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26, $27, $28, $29, $30, $31, $32, $33, $34, $35, $36, $37, $38, $39, $40, $41)
		ON CONFLICT DO NOTHING`,
		sb.ID, sb.AccountID, sb.ProjectID, sb.Profile, sb.Platform, string(sb.State),
		q.timeOrNow(sb.CreatedAt), d.Time(sb.DeadlineAt), d.NullTime(sb.ReadyAt), d.NullTime(sb.SuspendedAt), d.NullTime(sb.TerminatedAt),
		sb.EndReason, sb.Endpoint, sb.SSHUser, sb.Workspace, sb.HostKey,
		d.JSON(sb.GrantsJSON()), sb.IdempotencyKey, sb.RequestHash, d.JSON(sb.Consumer.JSON()),
		sb.LeaseHolder, d.NullTime(sb.LeaseUntil), sb.RestoreAttempts,
		sb.ForwardEndpoint, sb.Name, d.JSON(sb.LabelsJSON()), sb.NoWakeOnTraffic,
		sb.FromSnapshot, sb.RestoreSnapshot, sb.RecreatedFrom, sb.RecreatedAs, d.JSON(createRequestJSON(sb.CreateRequest)),
		d.JSON(sb.EnvJSON()), d.JSON(sb.SecretsJSON()), int64(sb.IdleTimeout/time.Second), sb.IgnoreBusy, sb.RetentionDays, d.NullTime(sb.RetentionWarnedAt),
		sb.NetworkJSON(), sb.CredentialsJSON(),
		d.Time(time.Now()))
	return OneRow(n, err, "insert sandbox "+sb.ID, store.ErrConflict)
}

// UpdateSandbox implements store.Tx.
func (q Queries) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	d := q.Dialect
	n, err := q.DB.Exec(ctx, `UPDATE sandboxes SET
			project_id = $2, state = $3, deadline_at = $4, ready_at = $5, suspended_at = $6,
			terminated_at = $7, end_reason = $8, endpoint = $9, ssh_user = $10, workspace = $11,
			host_key = $12, grants = $13, lease_holder = $14, lease_until = $15, restore_attempts = $16,
			forward_endpoint = $17, name = $18, labels = $19, no_wake_on_traffic = $20,
			state_since = CASE WHEN state = $3 THEN state_since ELSE $21 END,
			restore_snapshot = $22, recreated_as = $23,
			idle_timeout_seconds = $24, ignore_busy = $25, retention_days = $26, retention_warned_at = $27,
			network = $28, credentials = $29
		WHERE id = $1`,
		sb.ID, sb.ProjectID, string(sb.State), d.Time(sb.DeadlineAt), d.NullTime(sb.ReadyAt), d.NullTime(sb.SuspendedAt),
		d.NullTime(sb.TerminatedAt), sb.EndReason, sb.Endpoint, sb.SSHUser, sb.Workspace,
		sb.HostKey, d.JSON(sb.GrantsJSON()), sb.LeaseHolder, d.NullTime(sb.LeaseUntil), sb.RestoreAttempts,
		sb.ForwardEndpoint, sb.Name, d.JSON(sb.LabelsJSON()), sb.NoWakeOnTraffic, d.Time(time.Now()),
		sb.RestoreSnapshot, sb.RecreatedAs,
		int64(sb.IdleTimeout/time.Second), sb.IgnoreBusy, sb.RetentionDays, d.NullTime(sb.RetentionWarnedAt), sb.NetworkJSON(), sb.CredentialsJSON())
	return OneRow(n, err, "update sandbox "+sb.ID, store.ErrNotFound)
}

// createRequestJSON is the stored create request, "{}" for none.
func createRequestJSON(b []byte) []byte {
	if len(b) == 0 {
		return []byte("{}")
	}
	return b
}
