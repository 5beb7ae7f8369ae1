package store

import (
	"context"
	"encoding/json"
	"time"
)

// SnapshotState is where a snapshot is in its life.
type SnapshotState string

const (
	// SnapshotCreating: the row is written and the provider copy is
	// under way (a durable job); no storage line yet.
	SnapshotCreating SnapshotState = "creating"
	// SnapshotReady: the copy exists; its storage line is open.
	SnapshotReady SnapshotState = "ready"
	// SnapshotFailed: the copy could not be made; it never had a line.
	SnapshotFailed SnapshotState = "failed"
	// SnapshotDeleted: removed; its storage line is closed.
	SnapshotDeleted SnapshotState = "deleted"
)

// Snapshot is a point-in-time copy of a sandbox's workspace. It belongs
// to the account: it outlives the sandbox it was taken of.
type Snapshot struct {
	ID        string
	AccountID string
	SandboxID string
	// Platform and Profile are the sandbox's, so a fork of a deleted
	// sandbox's snapshot knows what to provision.
	Platform  string
	Profile   string
	Name      string
	Labels    map[string]string
	State     SnapshotState
	Reason    string // why it failed or was deleted
	CreatedAt time.Time
	ReadyAt   *time.Time
	DeletedAt *time.Time
}

// LabelsJSON encodes the labels for storage.
func (s *Snapshot) LabelsJSON() []byte {
	if len(s.Labels) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(s.Labels)
	return b
}

// SnapshotListOptions selects snapshots, newest first.
type SnapshotListOptions struct {
	AccountID string
	// SandboxID, when set, keeps the snapshots of that sandbox.
	SandboxID string
	// States, when set, keeps snapshots in one of them.
	States []SnapshotState
}

// SnapshotReader holds the snapshot queries.
type SnapshotReader interface {
	Snapshot(ctx context.Context, id string) (Snapshot, error)
	Snapshots(ctx context.Context, opts SnapshotListOptions) ([]Snapshot, error)
	// SnapshotSessions lists a snapshot's storage lines, oldest first.
	SnapshotSessions(ctx context.Context, snapshotID string) ([]Session, error)
}

// SnapshotWriter holds the snapshot writes; callers hold the account's
// lock (LockAccount), which serialises every change to its snapshots.
type SnapshotWriter interface {
	// InsertSnapshot inserts s; a duplicate ID is ErrConflict.
	InsertSnapshot(ctx context.Context, s Snapshot) error
	// UpdateSnapshot writes s's state, reason, ready and deleted times.
	UpdateSnapshot(ctx context.Context, s Snapshot) error
	// CloseSnapshotSession closes the snapshot's open storage line at
	// `at` with reason and returns how many it closed (0 or 1).
	CloseSnapshotSession(ctx context.Context, snapshotID string, at time.Time, reason string) (int, error)
}
