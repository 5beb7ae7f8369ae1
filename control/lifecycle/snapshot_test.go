package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// checkSnapshotLedger fails the test unless the snapshot's storage lines
// obey the rule of its state (lifecycle.CheckSnapshotLedger).
func checkSnapshotLedger(t *testing.T, st store.Store, id string) store.Snapshot {
	t.Helper()
	ctx := context.Background()
	snap, err := st.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := st.SnapshotSessions(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if err := lifecycle.CheckSnapshotLedger(snap, lines); err != nil {
		t.Fatal(err)
	}
	return snap
}

func readNotes(t *testing.T, sb store.Sandbox) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sb.Workspace, "notes.txt"))
	if err != nil {
		t.Fatalf("notes of %s: %v", sb.ID, err)
	}
	return string(b)
}

// TestSnapshotRestoreFork: a snapshot of a running sandbox is its own
// storage line while it exists; a restore in place brings the workspace
// back (compute closes snapshot_restore, storage runs while restoring,
// compute opens again); two forks start with the file; after the source
// sandbox is deleted its snapshot still forks; deleting the snapshot
// closes its line; the quota refuses past its limit, naming it.
func TestSnapshotRestoreFork(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		sb := h.readySandbox(t)

		snap, err := h.m.TakeSnapshot(ctx, h.acct, sb.ID, lifecycle.SnapshotRequest{Name: "before", Labels: map[string]string{"step": "1"}})
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if snap.State != store.SnapshotReady || snap.SandboxID != sb.ID || snap.Name != "before" {
			t.Fatalf("snapshot %+v; want ready, of %s, named before", snap, sb.ID)
		}
		checkSnapshotLedger(t, h.st, snap.ID)
		// The sandbox kept running, and its own ledger is untouched.
		wantSessions(t, h.st, sb.ID, []string{"compute:open"})
		h.waitState(t, sb.ID, store.StateReady, 0)

		// Break the workspace, then roll back in place.
		if err := os.WriteFile(filepath.Join(sb.Workspace, "notes.txt"), []byte("broken\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(sb.Workspace, "junk"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		back, err := h.m.RestoreSnapshot(ctx, h.acct, sb.ID, snap.ID)
		if err != nil {
			t.Fatalf("restore: %v", err)
		}
		if back.State != store.StateReady || back.RestoreSnapshot != "" {
			t.Fatalf("after restore: %s, restore_snapshot %q; want ready, cleared", back.State, back.RestoreSnapshot)
		}
		if got := readNotes(t, back); got != "kept across suspend\n" {
			t.Fatalf("notes after restore %q; want the snapshot's", got)
		}
		if _, err := os.Stat(filepath.Join(back.Workspace, "junk")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("junk after restore: %v; want gone", err)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:snapshot_restore", "storage:restored", "compute:open"})
		checkLedger(t, h.st, sb.ID)
		checkSnapshotLedger(t, h.st, snap.ID)

		// Two forks of one snapshot, each with the file and its own ledger.
		var forks []store.Sandbox
		for range 2 {
			f, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{FromSnapshot: snap.ID})
			if err != nil {
				t.Fatalf("fork: %v", err)
			}
			if f.FromSnapshot != snap.ID || f.Profile != sb.Profile {
				t.Fatalf("fork %+v; want from %s with profile %s", f, snap.ID, sb.Profile)
			}
			forks = append(forks, f)
		}
		for i, f := range forks {
			f = h.waitState(t, f.ID, store.StateReady, stateCeiling)
			forks[i] = f
			if got := readNotes(t, f); got != "kept across suspend\n" {
				t.Fatalf("notes of fork %s %q", f.ID, got)
			}
			wantSessions(t, h.st, f.ID, []string{"compute:open"})
		}

		// The source sandbox goes; its snapshot stays, billed, and forks.
		if _, err := h.m.Delete(ctx, h.acct, sb.ID); err != nil {
			t.Fatal(err)
		}
		h.waitState(t, sb.ID, store.StateTerminated, stateCeiling)
		checkSnapshotLedger(t, h.st, snap.ID)
		if s, _ := h.st.Snapshot(ctx, snap.ID); s.State != store.SnapshotReady {
			t.Fatalf("snapshot after its sandbox ended: %s; want ready", s.State)
		}
		orphanFork, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{FromSnapshot: snap.ID})
		if err != nil {
			t.Fatalf("fork of a deleted sandbox's snapshot: %v", err)
		}
		if got := readNotes(t, h.waitState(t, orphanFork.ID, store.StateReady, stateCeiling)); got != "kept across suspend\n" {
			t.Fatalf("notes of the orphan's fork %q", got)
		}
		// ... and restores another sandbox in place.
		if err := os.Remove(filepath.Join(forks[0].Workspace, "notes.txt")); err != nil {
			t.Fatal(err)
		}
		if _, err := h.m.RestoreSnapshot(ctx, h.acct, forks[0].ID, snap.ID); err != nil {
			t.Fatalf("restore from a deleted sandbox's snapshot: %v", err)
		}
		if got := readNotes(t, h.waitState(t, forks[0].ID, store.StateReady, 0)); got != "kept across suspend\n" {
			t.Fatalf("notes after cross restore %q", got)
		}

		// Quota: two live snapshots at most here.
		if _, err := h.m.TakeSnapshot(ctx, h.acct, forks[1].ID, lifecycle.SnapshotRequest{}); err != nil {
			t.Fatalf("second snapshot: %v", err)
		}
		_, err = h.m.TakeSnapshot(ctx, h.acct, forks[1].ID, lifecycle.SnapshotRequest{})
		var qe *lifecycle.SnapshotQuotaError
		if !errors.As(err, &qe) || qe.Limit != 2 {
			t.Fatalf("third snapshot: %v; want the quota of 2", err)
		}

		// Deleting closes the line; the copy goes; a fork of it is refused.
		del, err := h.m.DeleteSnapshot(ctx, h.acct, snap.ID)
		if err != nil || del.State != store.SnapshotDeleted {
			t.Fatalf("delete snapshot: %+v, %v", del, err)
		}
		checkSnapshotLedger(t, h.st, snap.ID)
		lines, _ := h.st.SnapshotSessions(ctx, snap.ID)
		if len(lines) != 1 || lines[0].EndReason != lifecycle.ReasonSnapshotDeleted {
			t.Fatalf("snapshot lines after delete %+v", lines)
		}
		if _, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{FromSnapshot: snap.ID}); !errors.Is(err, lifecycle.ErrInvalid) {
			t.Fatalf("fork of a deleted snapshot: %v; want invalid", err)
		}
		if _, err := h.m.TakeSnapshot(ctx, h.acct, forks[1].ID, lifecycle.SnapshotRequest{}); err != nil {
			t.Fatalf("snapshot after freeing quota: %v", err)
		}
		for _, f := range append(forks, orphanFork) {
			checkLedger(t, h.st, f.ID)
		}
	}, func(c *lifecycle.Config) { c.MaxSnapshots = 2 })
}

// TestRecreate: a recreate ends the sandbox (its compute line closes
// with recreate) and creates its successor from the stored request in one
// transaction: new ID, the name carried over, recreated_from and
// recreated_as linking them; recreating again returns the successor.
func TestRecreate(t *testing.T) {
	forBackends(t, func(t *testing.T, h *idleHarness) {
		ctx := context.Background()
		minutes := 30
		sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", DeadlineMinutes: &minutes,
			Name: "pr-1234", Labels: map[string]string{"pr": "1234"}})
		if err != nil {
			t.Fatal(err)
		}
		sb = h.waitState(t, sb.ID, store.StateReady, stateCeiling)
		next, err := h.m.Recreate(ctx, h.acct, "pr-1234")
		if err != nil {
			t.Fatalf("recreate: %v", err)
		}
		if next.ID == sb.ID || next.RecreatedFrom != sb.ID || next.Name != "pr-1234" || next.Labels["pr"] != "1234" {
			t.Fatalf("successor %+v; want a new ID from %s, name and labels kept", next, sb.ID)
		}
		old, err := h.st.Sandbox(ctx, sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if old.RecreatedAs != next.ID || old.EndReason != lifecycle.ReasonRecreate {
			t.Fatalf("old %s: recreated_as %q, end reason %q", old.ID, old.RecreatedAs, old.EndReason)
		}
		wantSessions(t, h.st, sb.ID, []string{"compute:" + lifecycle.ReasonRecreate})
		h.waitState(t, sb.ID, store.StateTerminated, stateCeiling)
		next = h.waitState(t, next.ID, store.StateReady, stateCeiling)
		wantSessions(t, h.st, next.ID, []string{"compute:open"})
		checkLedger(t, h.st, sb.ID)
		checkLedger(t, h.st, next.ID)
		if again, err := h.m.Recreate(ctx, h.acct, sb.ID); err != nil || again.ID != next.ID {
			t.Fatalf("recreate again: %s, %v; want the successor %s", again.ID, err, next.ID)
		}
		if named, err := h.m.Resolve(ctx, h.acct, "pr-1234"); err != nil || named.ID != next.ID {
			t.Fatalf("name now resolves to %s, %v; want %s", named.ID, err, next.ID)
		}
	})
}

// plainProvider hides every optional interface of the provider it wraps:
// a backend that cannot take snapshots.
type plainProvider struct{ provider.Provider }

// TestSnapshotsUnsupported: on a provider without snapshots, a snapshot,
// a fork and a restore are refused with ErrSnapshotsUnsupported, and
// nothing is written.
func TestSnapshotsUnsupported(t *testing.T) {
	h := newHarness(t, "sqlite", lifecycle.Config{}, func(p provider.Provider) provider.Provider { return plainProvider{p} })
	ctx := context.Background()
	sb := h.create(t, 30)
	if _, err := h.m.TakeSnapshot(ctx, h.acct, sb.ID, lifecycle.SnapshotRequest{}); !errors.Is(err, lifecycle.ErrSnapshotsUnsupported) {
		t.Errorf("snapshot: %v; want ErrSnapshotsUnsupported", err)
	}
	if _, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{FromSnapshot: "snap-x"}); !errors.Is(err, lifecycle.ErrSnapshotsUnsupported) {
		t.Errorf("fork: %v; want ErrSnapshotsUnsupported", err)
	}
	if _, err := h.m.RestoreSnapshot(ctx, h.acct, sb.ID, "snap-x"); !errors.Is(err, lifecycle.ErrSnapshotsUnsupported) {
		t.Errorf("restore: %v; want ErrSnapshotsUnsupported", err)
	}
	if list, err := h.st.Snapshots(ctx, store.SnapshotListOptions{AccountID: h.acct.ID}); err != nil || len(list) != 0 {
		t.Errorf("snapshots written: %v, %v", list, err)
	}
}
