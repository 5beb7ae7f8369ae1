package backend

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func (q Queries) scanSession(r Row) (store.Session, error) {
	var s store.Session
	var kind string
	err := r.Scan(&s.ID, &s.SandboxID, &s.AccountID, &s.Platform, &kind, &s.SnapshotID,
		q.Dialect.TimeDest(&s.StartedAt), q.Dialect.NullTimeDest(&s.EndedAt), &s.EndReason)
	s.Kind = store.SessionKind(kind)
	s.StartedAt, s.EndedAt = s.StartedAt.UTC(), store.UTCPtr(s.EndedAt)
	return s, err
}

// Sessions implements store.Reader.
func (q Queries) Sessions(ctx context.Context, sandboxID string) ([]store.Session, error) {
	return List(ctx, q.DB, "sessions of "+sandboxID, q.scanSession, `SELECT `+sessionCols+`
		FROM sandbox_sessions WHERE sandbox_id = $1 AND snapshot_id = '' ORDER BY started_at, id`, sandboxID)
}

const sessionCols = `id, sandbox_id, account_id, platform, kind, snapshot_id, started_at, ended_at, end_reason`

// SnapshotSessions implements store.Reader.
func (q Queries) SnapshotSessions(ctx context.Context, snapshotID string) ([]store.Session, error) {
	return List(ctx, q.DB, "sessions of "+snapshotID, q.scanSession, `SELECT `+sessionCols+`
		FROM sandbox_sessions WHERE snapshot_id = $1 ORDER BY started_at, id`, snapshotID)
}

// CloseSnapshotSession implements store.Tx.
func (q Queries) CloseSnapshotSession(ctx context.Context, snapshotID string, at time.Time, reason string) (int, error) {
	if snapshotID == "" {
		return 0, errors.New("close snapshot session: no snapshot named")
	}
	n, err := q.DB.Exec(ctx, `UPDATE sandbox_sessions SET ended_at = $2, end_reason = $3
		WHERE snapshot_id = $1 AND ended_at IS NULL`, snapshotID, q.Dialect.Time(at), reason)
	if err != nil {
		return 0, fmt.Errorf("close storage session of %s: %w", snapshotID, err)
	}
	return int(n), nil
}

// OpenSession implements store.Tx.
func (q Queries) OpenSession(ctx context.Context, s store.Session) (int64, error) {
	var id int64
	err := q.DB.QueryRow(ctx, `INSERT INTO sandbox_sessions (sandbox_id, account_id, platform, kind, started_at, snapshot_id)
		VALUES ($1, $2, $3, $4, $5, $6)
		ON CONFLICT DO NOTHING
		RETURNING id`, s.SandboxID, s.AccountID, s.Platform, string(s.Kind), q.Dialect.Time(s.StartedAt), s.SnapshotID).Scan(&id)
	if errors.Is(err, q.Dialect.NoRows) {
		return 0, fmt.Errorf("open %s session of %s: already open: %w", s.Kind, s.SandboxID, store.ErrConflict)
	}
	if err != nil {
		return 0, fmt.Errorf("open %s session of %s: %w", s.Kind, s.SandboxID, err)
	}
	return id, nil
}

// CloseSessions implements store.Tx.
func (q Queries) CloseSessions(ctx context.Context, sandboxID string, kind store.SessionKind, at time.Time, reason string) (int, error) {
	n, err := q.DB.Exec(ctx, `UPDATE sandbox_sessions SET ended_at = $3, end_reason = $4
		WHERE sandbox_id = $1 AND kind = $2 AND snapshot_id = '' AND ended_at IS NULL`, sandboxID, string(kind), q.Dialect.Time(at), reason)
	if err != nil {
		return 0, fmt.Errorf("close %s sessions of %s: %w", kind, sandboxID, err)
	}
	return int(n), nil
}

// scanEvent reads consumer as bytes: Postgres's jsonb and SQLite's text
// both scan into them.
func (q Queries) scanEvent(r Row) (store.Event, error) {
	var e store.Event
	var state string
	var consumer []byte
	if err := r.Scan(&e.ID, &e.SandboxID, &e.AccountID, &e.Type, &state, &e.Reason, &e.Actor, &e.Message, q.Dialect.TimeDest(&e.At), &consumer); err != nil {
		return e, err
	}
	e.State, e.At = store.State(state), e.At.UTC()
	if err := json.Unmarshal(consumer, &e.Consumer); err != nil {
		return e, fmt.Errorf("decode consumer of event %d: %w", e.ID, err)
	}
	return e, nil
}

// Events implements store.Reader.
func (q Queries) Events(ctx context.Context, sandboxID string, afterID int64) ([]store.Event, error) {
	return List(ctx, q.DB, "events of "+sandboxID, q.scanEvent, `SELECT id, sandbox_id, account_id, type, state, reason, actor, message, at, consumer
		FROM events WHERE sandbox_id = $1 AND id > $2 ORDER BY id`, sandboxID, afterID)
}

// InsertEvent writes e's row, copying its sandbox's consumer; each backend's
// InsertEvent adds how it signals the event's streams.
func (q Queries) InsertEvent(ctx context.Context, e store.Event) error {
	_, err := q.DB.Exec(ctx, `INSERT INTO events (sandbox_id, account_id, type, state, reason, actor, message, at, consumer)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, coalesce((SELECT consumer FROM sandboxes WHERE id = $1), '{}'))`,
		e.SandboxID, e.AccountID, e.Type, string(e.State), e.Reason, e.Actor, e.Message, q.timeOrNow(e.At))
	if err != nil {
		return fmt.Errorf("insert %s event of %s: %w", e.Type, e.SandboxID, err)
	}
	return nil
}
