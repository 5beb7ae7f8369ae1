package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// RestoreSnapshot rolls a sandbox back to a snapshot in place: same ID,
// name, endpoint names and grants, its workspace replaced by the
// snapshot's. It rides the wake's restore (lease, takeover by the sweep,
// budget, settling): a ready sandbox moves to restoring in one
// transaction that closes its compute line with snapshot_restore and
// opens a storage line (the restoring row of the billing rule); a
// suspended one moves to restoring keeping its storage line. The restore
// brings the snapshot back instead of the suspend's copy, and its end
// closes storage and opens compute, as a wake's does. It returns once the
// sandbox is ready again; ctx bounds the wait only.
//
// The snapshot may be of another sandbox of the account (of the same
// platform), a deleted one included.
func (m *Manager) RestoreSnapshot(ctx context.Context, acct store.Account, idOrName, snapshotID string) (store.Sandbox, error) {
	snap, err := m.usableSnapshot(ctx, acct, snapshotID, "snapshot")
	if err != nil {
		return store.Sandbox{}, err
	}
	if _, ok := m.suspender(); !ok {
		return store.Sandbox{}, ErrSnapshotsUnsupported
	}
	sb, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	if snap.Platform != sb.Platform {
		return store.Sandbox{}, invalid("snapshot", "snapshot %s is of a %s sandbox; this one is %s", snap.ID, snap.Platform, sb.Platform)
	}
	l := m.newLease(sb.ID)
	l.attempt = 1
	actor := "account:" + acct.ID
	var changed bool
	switch sb.State {
	case store.StateReady:
		changed, _, err = m.transition(ctx, sb.ID, step{
			from: store.StateReady, to: store.StateRestoring, reason: ReasonSnapshotRestore, actor: actor, message: snap.ID,
			apply: func(tx store.Tx, cur *store.Sandbox, now time.Time) error {
				if _, err := tx.CloseSessions(ctx, cur.ID, store.SessionCompute, now, ReasonSnapshotRestore); err != nil {
					return err
				}
				if _, err := tx.OpenSession(ctx, store.Session{
					SandboxID: cur.ID, AccountID: cur.AccountID, Platform: cur.Platform, Kind: store.SessionStorage, StartedAt: now,
				}); err != nil {
					return err
				}
				// The deadline clock pauses while the storage line runs,
				// as it does while suspended.
				cur.SuspendedAt = &now
				cur.RestoreSnapshot = snap.ID
				l.grant(cur, m.cfg.RestoreLease)
				return nil
			},
		})
	case store.StateSuspended:
		changed, _, err = m.transition(ctx, sb.ID, step{
			from: store.StateSuspended, to: store.StateRestoring, reason: ReasonSnapshotRestore, actor: actor, message: snap.ID,
			apply: func(tx store.Tx, cur *store.Sandbox, _ time.Time) error {
				if err := m.Admit(ctx, tx, cur.AccountID, cur.Platform); err != nil {
					return err
				}
				cur.RestoreSnapshot = snap.ID
				l.grant(cur, m.cfg.RestoreLease)
				return nil
			},
		})
	default:
		return store.Sandbox{}, &StateError{State: string(sb.State), Action: "restore"}
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("restore %s to %s: %w", sb.ID, snap.ID, err)
	}
	if !changed {
		// It changed state under us; say which.
		cur, err := m.Get(ctx, acct, sb.ID)
		if err != nil {
			return store.Sandbox{}, err
		}
		return store.Sandbox{}, &StateError{State: string(cur.State), Action: "restore"}
	}
	m.log.InfoContext(ctx, "restoring sandbox to a snapshot", "sandbox_id", sb.ID, "snapshot_id", snap.ID)
	m.restoreInline(ctx, l)
	if err := m.wake(ctx, sb.ID, true); err != nil {
		return store.Sandbox{}, err
	}
	return m.Get(ctx, acct, sb.ID)
}
