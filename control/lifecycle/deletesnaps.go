package lifecycle

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// DeleteWithSnapshots is Delete that then deletes the sandbox's snapshots
// too (DELETE /sandboxes/{id}?delete_snapshots=true). Without it a
// sandbox's snapshots outlive it: they are the account's data, kept (and
// billed) until deleted one by one or with the account.
//
// The sandbox ends first, so a refused delete keeps every snapshot; each
// snapshot is then deleted in its own transaction with its line closed
// (DeleteSnapshot). A crash between them leaves snapshots that a repeat
// of the same request deletes: ending an ended sandbox is a no-op.
func (m *Manager) DeleteWithSnapshots(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, []store.Snapshot, error) {
	sb, err := m.Delete(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, nil, err
	}
	list, err := m.store.Snapshots(ctx, store.SnapshotListOptions{AccountID: acct.ID, SandboxID: sb.ID,
		States: []store.SnapshotState{store.SnapshotCreating, store.SnapshotReady, store.SnapshotFailed}})
	if err != nil {
		return sb, nil, fmt.Errorf("list snapshots of %s: %w", sb.ID, err)
	}
	deleted := make([]store.Snapshot, 0, len(list))
	for _, s := range list {
		d, err := m.DeleteSnapshot(ctx, acct, s.ID)
		if err != nil {
			return sb, deleted, err
		}
		deleted = append(deleted, d)
	}
	return sb, deleted, nil
}
