package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// testSnapshots: snapshot rows round-trip and list per account and
// sandbox; a snapshot's storage line is its own (the sandbox's lines and
// CloseSessions leave it alone), one open per snapshot; the sandbox's new
// fields round-trip.
func testSnapshots(t *testing.T, ctx context.Context, s store.Store) {
	sb := sandbox("a", "sb-1", t0)
	sb.FromSnapshot = "snap-origin"
	sb.RecreatedFrom = "sb-0"
	sb.CreateRequest = []byte(`{"profile":"small"}`)
	other := sandbox("a", "sb-2", t0.Add(time.Second))
	insertSandboxes(t, s, sb, other)

	snap1 := store.Snapshot{ID: "snap-1", AccountID: "a", SandboxID: sb.ID, Platform: "linux", Profile: "small",
		Name: "before", Labels: map[string]string{"k": "v"}, State: store.SnapshotCreating, CreatedAt: t0}
	snap2 := store.Snapshot{ID: "snap-2", AccountID: "a", SandboxID: other.ID, Platform: "linux", Profile: "small",
		State: store.SnapshotCreating, CreatedAt: t0.Add(time.Minute)}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.InsertSnapshot(ctx, snap1); err != nil {
			return err
		}
		wantErr(t, "duplicate snapshot", tx.InsertSnapshot(ctx, snap1), store.ErrConflict)
		return tx.InsertSnapshot(ctx, snap2)
	})
	wantRead(t, "snapshot", snap1)(s.Snapshot(ctx, "snap-1"))
	_, err := s.Snapshot(ctx, "snap-none")
	wantErr(t, "unknown snapshot", err, store.ErrNotFound)

	ready := t0.Add(2 * time.Minute)
	snap1.State, snap1.ReadyAt = store.SnapshotReady, &ready
	var lineID int64
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.UpdateSnapshot(ctx, snap1); err != nil {
			return err
		}
		if _, err := tx.OpenSession(ctx, session(sb, store.SessionStorage, t0)); err != nil {
			return err // the sandbox's own storage line
		}
		line := session(sb, store.SessionStorage, ready)
		line.SnapshotID = snap1.ID
		lineID, err = tx.OpenSession(ctx, line)
		if err != nil {
			return err
		}
		_, err = tx.OpenSession(ctx, line)
		wantErr(t, "second open line of one snapshot", err, store.ErrConflict)
		return nil
	})
	wantRead(t, "ready snapshot", snap1)(s.Snapshot(ctx, "snap-1"))
	wantRead(t, "account's snapshots", []store.Snapshot{snap2, snap1})(s.Snapshots(ctx, store.SnapshotListOptions{AccountID: "a"}))
	wantRead(t, "sandbox's snapshots", []store.Snapshot{snap1})(s.Snapshots(ctx, store.SnapshotListOptions{AccountID: "a", SandboxID: sb.ID}))
	wantRead(t, "ready snapshots", []store.Snapshot{snap1})(s.Snapshots(ctx, store.SnapshotListOptions{AccountID: "a", States: []store.SnapshotState{store.SnapshotReady}}))
	wantRead(t, "another account's", []store.Snapshot(nil))(s.Snapshots(ctx, store.SnapshotListOptions{AccountID: "b"}))

	// Closing the sandbox's storage lines leaves the snapshot's open.
	inTx(t, s, func(tx store.Tx) error {
		n, err := tx.CloseSessions(ctx, sb.ID, store.SessionStorage, ready, "explicit_delete")
		if n != 1 {
			t.Errorf("CloseSessions closed %d, want the sandbox's 1", n)
		}
		return err
	})
	own, err := s.Sessions(ctx, sb.ID)
	if err != nil || len(own) != 1 || own[0].SnapshotID != "" {
		t.Errorf("sandbox's own lines %+v, %v; want its one storage line", own, err)
	}
	wantRead(t, "snapshot's open line", []store.Session{{ID: lineID, SandboxID: sb.ID, AccountID: "a", Platform: "linux",
		Kind: store.SessionStorage, SnapshotID: snap1.ID, StartedAt: ready}})(s.SnapshotSessions(ctx, snap1.ID))

	gone := ready.Add(time.Hour)
	snap1.State, snap1.DeletedAt, snap1.Reason = store.SnapshotDeleted, &gone, "deleted"
	inTx(t, s, func(tx store.Tx) error {
		if n, err := tx.CloseSnapshotSession(ctx, snap1.ID, gone, "deleted"); err != nil || n != 1 {
			t.Errorf("CloseSnapshotSession: %d, %v; want 1", n, err)
		}
		return tx.UpdateSnapshot(ctx, snap1)
	})
	wantRead(t, "deleted snapshot", snap1)(s.Snapshot(ctx, "snap-1"))
	wantRead(t, "snapshot's closed line", []store.Session{{ID: lineID, SandboxID: sb.ID, AccountID: "a", Platform: "linux",
		Kind: store.SessionStorage, SnapshotID: snap1.ID, StartedAt: ready, EndedAt: &gone, EndReason: "deleted"}})(s.SnapshotSessions(ctx, snap1.ID))
	// The snapshot's line is billed as storage with the rest.
	rows, err := s.Usage(ctx, "a", t0, gone, gone)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Kind != store.SessionStorage || rows[0].Seconds != gone.Sub(ready).Seconds()+ready.Sub(t0).Seconds() {
		t.Errorf("usage %+v; want storage of both lines", rows)
	}

	// The sandbox's new fields round-trip, and the mutable ones update.
	got, err := s.Sandbox(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	var req map[string]string
	if err := json.Unmarshal(got.CreateRequest, &req); err != nil || req["profile"] != "small" {
		t.Errorf("create request read back %q, %v", got.CreateRequest, err)
	}
	if got.FromSnapshot != "snap-origin" || got.RecreatedFrom != "sb-0" {
		t.Errorf("sandbox read back %+v", got)
	}
	got.RestoreSnapshot, got.RecreatedAs = "snap-1", "sb-3"
	inTx(t, s, func(tx store.Tx) error { return tx.UpdateSandbox(ctx, got) })
	wantRead(t, "updated sandbox", got)(s.Sandbox(ctx, sb.ID))
}
