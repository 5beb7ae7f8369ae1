package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// Reasons snapshot lines and snapshot-driven changes record.
const (
	// ReasonSnapshotDeleted closes a snapshot's storage line.
	ReasonSnapshotDeleted = "snapshot_deleted"
	// ReasonSnapshotRestore closes a sandbox's compute line when its
	// owner rolls it back to a snapshot in place.
	ReasonSnapshotRestore = "snapshot_restore"
	// ReasonSnapshotFailed is the reason of a snapshot whose copy failed
	// every attempt.
	ReasonSnapshotFailed = "snapshot_failed"
)

var (
	// ErrSnapshotsUnsupported refuses snapshots, forks and restores on a
	// provider that cannot take snapshots.
	ErrSnapshotsUnsupported = errors.New("this deployment's sandboxes cannot be snapshotted (its provider takes no snapshots)")
	// ErrSnapshotNotFound is a snapshot that is not the caller's account's.
	ErrSnapshotNotFound = errors.New("snapshot not found")
)

// SnapshotQuotaError refuses a snapshot past the account's quota.
type SnapshotQuotaError struct {
	Count int // the account's snapshots that count (creating or ready)
	Limit int // the account's limit, or the deployment's default
}

func (e *SnapshotQuotaError) Error() string {
	return fmt.Sprintf("snapshot quota reached: this account has %d snapshots and may keep at most %d; delete one first (DELETE /api/v1/snapshots/{id}, sbx snapshots)", e.Count, e.Limit)
}

// SnapshotRequest is POST /sandboxes/{id}/snapshots after JSON decoding.
type SnapshotRequest struct {
	Name   string            `json:"name,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
}

// liveSnapshotStates are the snapshots that count against the quota.
var liveSnapshotStates = []store.SnapshotState{store.SnapshotCreating, store.SnapshotReady}

// NewSnapshotID returns "snap-" and 26 lowercase base32 characters.
func NewSnapshotID() string { return newPrefixedID("snap-") }

func (m *Manager) snapshotter() (provider.Snapshotter, bool) {
	s, ok := m.prov.(provider.Snapshotter)
	return s, ok
}

// TakeSnapshot records a snapshot of a ready sandbox as creating and, in
// the same transaction, enqueues the job that copies the workspace (the
// sandbox keeps running); the job's end opens the snapshot's storage
// line. It returns once the snapshot is ready or failed, or, still
// creating, when ctx ends.
func (m *Manager) TakeSnapshot(ctx context.Context, acct store.Account, idOrName string, req SnapshotRequest) (store.Snapshot, error) {
	if _, ok := m.snapshotter(); !ok {
		return store.Snapshot{}, ErrSnapshotsUnsupported
	}
	if req.Name != "" {
		if err := validateName(req.Name); err != nil {
			return store.Snapshot{}, err
		}
	}
	if err := validateLabels(req.Labels); err != nil {
		return store.Snapshot{}, err
	}
	sb, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Snapshot{}, err
	}
	now := m.now().UTC().Truncate(time.Microsecond)
	snap := store.Snapshot{
		ID: NewSnapshotID(), AccountID: acct.ID, SandboxID: sb.ID, Platform: sb.Platform, Profile: sb.Profile,
		Name: req.Name, Labels: req.Labels, State: store.SnapshotCreating, CreatedAt: now,
	}
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, acct.ID); err != nil {
			return err
		}
		cur, err := tx.SandboxForUpdate(ctx, sb.ID)
		if err != nil {
			return err
		}
		if cur.State != store.StateReady {
			return &StateError{State: string(cur.State), Action: "snapshot"}
		}
		live, err := tx.Snapshots(ctx, store.SnapshotListOptions{AccountID: acct.ID, States: liveSnapshotStates})
		if err != nil {
			return err
		}
		// Read under the account lock, so an operator's change applies
		// to the next snapshot and never between count and insert.
		fresh, err := tx.Account(ctx, acct.ID)
		if err != nil {
			return err
		}
		limit := cmp.Or(fresh.SnapshotLimit, m.cfg.MaxSnapshots)
		if len(live) >= limit {
			return &SnapshotQuotaError{Count: len(live), Limit: limit}
		}
		if err := tx.InsertSnapshot(ctx, snap); err != nil {
			return err
		}
		if err := tx.InsertEvent(ctx, snapshotEvent(cur, snap, "snapshot_started", "account:"+acct.ID, now)); err != nil {
			return err
		}
		return tx.Enqueue(ctx, SnapshotArgs{SnapshotID: snap.ID}, nil)
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: %w", sb.ID, err)
	}
	m.log.InfoContext(ctx, "snapshot started", "sandbox_id", sb.ID, "snapshot_id", snap.ID)
	return m.awaitSnapshot(ctx, snap)
}

// awaitSnapshot polls until snap leaves creating or ctx ends; the copy
// runs in a job, which notifies no one.
func (m *Manager) awaitSnapshot(ctx context.Context, snap store.Snapshot) (store.Snapshot, error) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		cur, err := m.store.Snapshot(ctx, snap.ID)
		if err == nil && cur.State != store.SnapshotCreating {
			return cur, nil
		}
		if err != nil && ctx.Err() == nil {
			return store.Snapshot{}, fmt.Errorf("read snapshot %s: %w", snap.ID, err)
		}
		select {
		case <-ctx.Done():
			return snap, nil // still creating: the job goes on
		case <-t.C:
		}
	}
}

func snapshotEvent(sb store.Sandbox, snap store.Snapshot, reason, actor string, at time.Time) store.Event {
	return store.Event{
		SandboxID: sb.ID, AccountID: sb.AccountID, Type: "snapshot", State: sb.State,
		Reason: reason, Actor: actor, Message: snap.ID, At: at,
	}
}

// Snapshot returns one of the account's snapshots.
func (m *Manager) Snapshot(ctx context.Context, acct store.Account, id string) (store.Snapshot, error) {
	snap, err := m.store.Snapshot(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && snap.AccountID != acct.ID) {
		return store.Snapshot{}, ErrSnapshotNotFound
	}
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return snap, nil
}

// Snapshots lists the account's snapshots that have not been deleted,
// newest first; those of one sandbox when idOrName is set (a deleted
// sandbox's too, by ID).
func (m *Manager) Snapshots(ctx context.Context, acct store.Account, idOrName string) ([]store.Snapshot, error) {
	opts := store.SnapshotListOptions{AccountID: acct.ID,
		States: []store.SnapshotState{store.SnapshotCreating, store.SnapshotReady, store.SnapshotFailed}}
	if idOrName != "" {
		sb, err := m.Resolve(ctx, acct, idOrName)
		if err != nil {
			return nil, err
		}
		opts.SandboxID = sb.ID
	}
	list, err := m.store.Snapshots(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return list, nil
}

// DeleteSnapshot removes a snapshot: its storage line closes with
// snapshot_deleted and it reads deleted in one transaction, which
// enqueues the removal of the copy. Deleting it again returns it as is.
func (m *Manager) DeleteSnapshot(ctx context.Context, acct store.Account, id string) (store.Snapshot, error) {
	snap, err := m.Snapshot(ctx, acct, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, acct.ID); err != nil {
			return err
		}
		sb, err := tx.SandboxForUpdate(ctx, snap.SandboxID)
		if err != nil {
			return err
		}
		if snap, err = tx.Snapshot(ctx, id); err != nil || snap.State == store.SnapshotDeleted {
			return err
		}
		now := m.now().UTC()
		if _, err := tx.CloseSnapshotSession(ctx, snap.ID, now, ReasonSnapshotDeleted); err != nil {
			return err
		}
		snap.State, snap.DeletedAt, snap.Reason = store.SnapshotDeleted, &now, ReasonSnapshotDeleted
		if err := tx.UpdateSnapshot(ctx, snap); err != nil {
			return err
		}
		if err := tx.InsertEvent(ctx, snapshotEvent(sb, snap, ReasonSnapshotDeleted, "account:"+acct.ID, now)); err != nil {
			return err
		}
		return tx.Enqueue(ctx, DeleteSnapshotArgs{SnapshotID: snap.ID}, nil)
	})
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	return snap, nil
}

// usableSnapshot is the account's snapshot id, ready, for a fork or a
// restore; field names the request's field in a refusal.
func (m *Manager) usableSnapshot(ctx context.Context, acct store.Account, id, field string) (store.Snapshot, error) {
	if _, ok := m.snapshotter(); !ok {
		return store.Snapshot{}, ErrSnapshotsUnsupported
	}
	if !strings.HasPrefix(id, "snap-") {
		return store.Snapshot{}, invalid(field, "must be a snapshot ID (snap-...)")
	}
	snap, err := m.Snapshot(ctx, acct, id)
	if errors.Is(err, ErrSnapshotNotFound) {
		return store.Snapshot{}, invalid(field, "no snapshot %s in this account", id)
	}
	if err != nil {
		return store.Snapshot{}, err
	}
	if snap.State != store.SnapshotReady {
		return store.Snapshot{}, invalid(field, "snapshot %s is %s, not ready", id, snap.State)
	}
	return snap, nil
}

// SnapshotArgs asks for a creating snapshot's copy to be made.
type SnapshotArgs struct {
	SnapshotID string `json:"snapshot_id"`
}

// Kind implements river.JobArgs.
func (SnapshotArgs) Kind() string { return "snapshot.take" }

// InsertOpts: a few attempts; a copy that keeps failing fails the
// snapshot rather than leaving it creating.
func (SnapshotArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// DeleteSnapshotArgs asks for a deleted snapshot's copy to be removed.
type DeleteSnapshotArgs struct {
	SnapshotID string `json:"snapshot_id"`
}

// Kind implements river.JobArgs.
func (DeleteSnapshotArgs) Kind() string { return "snapshot.delete" }

// InsertOpts: removal retries like a teardown.
func (DeleteSnapshotArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

type snapshotWorker struct {
	river.WorkerDefaults[SnapshotArgs]
	m *Manager
}

// Work copies the workspace (idempotent in every provider), then marks
// the snapshot ready and opens its storage line in one transaction. A
// crash anywhere before that commit leaves it creating with no line, and
// the job runs again.
func (w *snapshotWorker) Work(ctx context.Context, job *river.Job[SnapshotArgs]) error {
	m := w.m
	snap, err := m.store.Snapshot(ctx, job.Args.SnapshotID)
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("snapshot %s vanished", job.Args.SnapshotID))
	}
	if err != nil || snap.State != store.SnapshotCreating {
		return err
	}
	sn, ok := m.snapshotter()
	if !ok {
		return m.settleSnapshot(ctx, snap.ID, store.SnapshotFailed, ErrSnapshotsUnsupported.Error())
	}
	if err := sn.Snapshot(ctx, snap.SandboxID, snap.ID); err != nil {
		m.log.WarnContext(ctx, "snapshot attempt failed", "snapshot_id", snap.ID, "sandbox_id", snap.SandboxID, "attempt", job.Attempt, "err", err)
		if job.Attempt >= job.MaxAttempts || errors.Is(err, provider.ErrNotFound) {
			return m.settleSnapshot(ctx, snap.ID, store.SnapshotFailed, err.Error())
		}
		return fmt.Errorf("snapshot %s: %w", snap.ID, err)
	}
	return m.settleSnapshot(ctx, snap.ID, store.SnapshotReady, "")
}

// settleSnapshot moves a creating snapshot to ready (opening its storage
// line) or failed (why recorded), with the sandbox's event. One deleted
// while it was copied has its copy removed again.
func (m *Manager) settleSnapshot(ctx context.Context, id string, to store.SnapshotState, why string) error {
	deleted := false
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		snap, err := tx.Snapshot(ctx, id)
		if err != nil {
			return err
		}
		if err := tx.LockAccount(ctx, snap.AccountID); err != nil {
			return err
		}
		sb, err := tx.SandboxForUpdate(ctx, snap.SandboxID)
		if err != nil {
			return err
		}
		if snap, err = tx.Snapshot(ctx, id); err != nil {
			return err
		}
		if snap.State != store.SnapshotCreating {
			deleted = snap.State == store.SnapshotDeleted
			return nil
		}
		now := m.now().UTC()
		snap.State = to
		reason := "snapshot_ready"
		if to == store.SnapshotReady {
			snap.ReadyAt = &now
			if _, err := tx.OpenSession(ctx, store.Session{
				SandboxID: snap.SandboxID, SnapshotID: snap.ID, AccountID: snap.AccountID, Platform: snap.Platform,
				Kind: store.SessionStorage, StartedAt: now,
			}); err != nil {
				return err
			}
		} else {
			snap.Reason, reason = ReasonSnapshotFailed, ReasonSnapshotFailed
		}
		if err := tx.UpdateSnapshot(ctx, snap); err != nil {
			return err
		}
		ev := snapshotEvent(sb, snap, reason, "snapshotter", now)
		if why != "" {
			ev.Message += ": " + why
		}
		return tx.InsertEvent(ctx, ev)
	})
	if err != nil {
		return fmt.Errorf("settle snapshot %s: %w", id, err)
	}
	if deleted {
		if sn, ok := m.snapshotter(); ok {
			return sn.DeleteSnapshot(ctx, id)
		}
	}
	return nil
}

type deleteSnapshotWorker struct {
	river.WorkerDefaults[DeleteSnapshotArgs]
	m *Manager
}

func (w *deleteSnapshotWorker) Work(ctx context.Context, job *river.Job[DeleteSnapshotArgs]) error {
	sn, ok := w.m.snapshotter()
	if !ok {
		return nil
	}
	if err := sn.DeleteSnapshot(ctx, job.Args.SnapshotID); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", job.Args.SnapshotID, err)
	}
	return nil
}

// CheckSnapshotLedger reports how a snapshot's storage lines break the
// rule, or nil: a ready snapshot has exactly one open line; a creating or
// failed one has none at all; a deleted one has no open line and at most
// one closed (with a reason, ending no earlier than it started).
func CheckSnapshotLedger(snap store.Snapshot, lines []store.Session) error {
	var errs []error
	open := 0
	for _, l := range lines {
		if l.SnapshotID != snap.ID || l.Kind != store.SessionStorage {
			errs = append(errs, fmt.Errorf("line %d (%s of %q) is not this snapshot's storage line", l.ID, l.Kind, l.SnapshotID))
		}
		if l.EndedAt == nil {
			open++
			continue
		}
		if l.EndedAt.Before(l.StartedAt) || l.EndReason == "" {
			errs = append(errs, fmt.Errorf("line %d closed at %v (started %v) with reason %q", l.ID, *l.EndedAt, l.StartedAt, l.EndReason))
		}
	}
	switch snap.State {
	case store.SnapshotReady:
		if open != 1 || len(lines) != 1 {
			errs = append(errs, fmt.Errorf("%d lines, %d open; want exactly 1 open", len(lines), open))
		}
	case store.SnapshotDeleted:
		if open != 0 || len(lines) > 1 {
			errs = append(errs, fmt.Errorf("%d lines, %d open; want at most 1, closed", len(lines), open))
		}
	default:
		if len(lines) != 0 {
			errs = append(errs, fmt.Errorf("%d lines; want none", len(lines)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("ledger of snapshot %s (%s): %w", snap.ID, snap.State, err)
	}
	return nil
}
