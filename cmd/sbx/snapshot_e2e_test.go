package main

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// execOut runs command in the sandbox over the API and returns its stdout.
func execOut(t *testing.T, p *devProc, id, command string) string {
	t.Helper()
	var res struct {
		Stdout   string `json:"stdout"`
		ExitCode int    `json:"exit_code"`
	}
	if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": command}, &res); code != 200 {
		t.Fatalf("exec %q in %s: %d", command, id, code)
	}
	return res.Stdout
}

// checkSnapshotLedgers fails t unless every snapshot of the account keeps
// its billing rule (lifecycle.CheckSnapshotLedger).
func checkSnapshotLedgers(t *testing.T, st store.Store, when string) {
	t.Helper()
	ctx := context.Background()
	snaps, err := st.Snapshots(ctx, store.SnapshotListOptions{AccountID: devAccountID(t, st)})
	if err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	for _, s := range snaps {
		lines, err := st.SnapshotSessions(ctx, s.ID)
		if err != nil {
			t.Fatalf("%s: %v", when, err)
		}
		if err := lifecycle.CheckSnapshotLedger(s, lines); err != nil {
			t.Errorf("%s: %v", when, err)
		}
	}
}

// devAccountID is the account sbx dev seeds (the only one).
func devAccountID(t *testing.T, st store.Store) string {
	t.Helper()
	accts, err := st.Accounts(context.Background())
	if err != nil || len(accts) == 0 {
		t.Fatalf("accounts: %v, %v", accts, err)
	}
	return accts[0].ID
}

// TestSnapshotEndToEnd is the checkpoint flow on a real `sbx dev`, with
// the CLI: write a file, `sbx snapshot`, break the workspace, `sbx
// restore`, the file is back; `sbx fork` the snapshot twice and both
// forks have the file; `sbx snapshots` lists it; `sbx recreate` gives a
// new sandbox of the same name. The ledger keeps its rule throughout.
func TestSnapshotEndToEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		p := startDev(t, t.TempDir(), dbURL)
		st := openStore(t, p.DataDir, dbURL)
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "name": "checkpoints"}, &sb); code != 201 {
			t.Fatalf("create: %d", code)
		}
		p.waitStatus(sb.ID, "ready", 2*time.Minute)
		execOut(t, p, sb.ID, "echo precious > notes.txt")

		snap := strings.TrimSpace(p.cli("snapshot", "checkpoints", "--name", "before", "-o", "id"))
		if !strings.HasPrefix(snap, "snap-") {
			t.Fatalf("sbx snapshot printed %q", snap)
		}
		if list := p.cli("snapshots", "checkpoints"); !strings.Contains(list, snap) || !strings.Contains(list, "before") {
			t.Fatalf("sbx snapshots:\n%s", list)
		}
		execOut(t, p, sb.ID, "rm notes.txt && echo junk > junk")
		p.cli("restore", "checkpoints", snap)
		if got := execOut(t, p, sb.ID, "cat notes.txt; ls"); got != "precious\nnotes.txt\n" {
			t.Fatalf("workspace after sbx restore: %q", got)
		}
		if got := ledger(t, st, sb.ID); got != "compute:snapshot_restore storage:restored compute:open" {
			t.Fatalf("ledger after sbx restore: %q", got)
		}

		for i := range 2 {
			fork := strings.TrimSpace(p.cli("fork", snap, "-o", "id"))
			if got := execOut(t, p, fork, "cat notes.txt"); got != "precious\n" {
				t.Fatalf("fork %d (%s) notes: %q", i, fork, got)
			}
		}
		checkLedgers(t, st, "after the forks")
		checkSnapshotLedgers(t, st, "after the forks")

		next := strings.TrimSpace(p.cli("recreate", "checkpoints", "-o", "id"))
		if next == sb.ID || !strings.HasPrefix(next, "sbx-") {
			t.Fatalf("sbx recreate printed %q", next)
		}
		if got := execOut(t, p, "checkpoints", "ls"); got != "" {
			t.Fatalf("the recreated sandbox's workspace is not fresh: %q", got)
		}
		p.cli("snapshots", "--rm", snap)
		checkSnapshotLedgers(t, st, "after sbx snapshots --rm")
		checkLedgers(t, st, "at the end")
		p.stop()
	})
}

// TestCrashMidSnapshotAndRestore kills `sbx dev` with SIGKILL while a
// snapshot is being copied, then again while a sandbox is being restored
// to it in place, restarting it on the same database each time: the
// snapshot is finished (one open storage line) and the restore taken
// over (the workspace is the snapshot's), no sandbox is left stuck, and
// the billing rule holds before and after each crash. The workspace holds
// 128 MB so that both are caught in flight.
func TestCrashMidSnapshotAndRestore(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		ctx := context.Background()
		dataDir := t.TempDir()
		st := openStore(t, dataDir, dbURL)
		p := startDev(t, dataDir, dbURL)
		id := createReady(t, p)
		execOut(t, p, id, "head -c 134217728 /dev/urandom > big && sha256sum big > big.sum")

		background := func(path, body string) chan struct{} {
			done := make(chan struct{})
			go func() { // its request dies with the process
				defer close(done)
				c := &http.Client{Timeout: 2 * time.Minute}
				req, _ := http.NewRequest("POST", p.API+path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+p.Token)
				req.Header.Set("Content-Type", "application/json")
				if resp, err := c.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
			return done
		}

		// Mid-snapshot.
		done := background("/api/v1/sandboxes/"+id+"/snapshots", `{"name":"crash"}`)
		var snap store.Snapshot
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
			list, err := st.Snapshots(ctx, store.SnapshotListOptions{AccountID: devAccountID(t, st), SandboxID: id})
			if err != nil {
				t.Fatal(err)
			}
			if len(list) == 1 {
				snap = list[0]
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("no snapshot row after a minute")
			}
		}
		if snap.State != store.SnapshotCreating {
			t.Fatalf("snapshot is %s, want to catch it creating", snap.State)
		}
		p.crash()
		<-done
		checkLedgers(t, st, "after the crash mid-snapshot")
		checkSnapshotLedgers(t, st, "after the crash mid-snapshot")
		if s, _ := st.Snapshot(ctx, snap.ID); s.State != store.SnapshotCreating {
			t.Fatalf("the crash left the snapshot %s, want creating (the copy finished before the kill)", s.State)
		}
		p = startDev(t, dataDir, dbURL)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
			s, err := st.Snapshot(ctx, snap.ID)
			if err != nil {
				t.Fatal(err)
			}
			if s.State == store.SnapshotReady {
				break
			}
			if s.State != store.SnapshotCreating || time.Now().After(deadline) {
				t.Fatalf("snapshot %s after the restart; want ready", s.State)
			}
		}
		p.waitStatus(id, "ready", time.Minute)
		checkSnapshotLedgers(t, st, "after the restart mid-snapshot")
		checkLedgers(t, st, "after the restart mid-snapshot")

		// Mid-restore, with the workspace changed since the snapshot.
		execOut(t, p, id, "rm big && echo after > after.txt")
		done = background("/api/v1/sandboxes/"+id+"/restore", `{"snapshot":"`+snap.ID+`"}`)
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(2 * time.Millisecond) {
			sb, err := st.Sandbox(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if sb.State == store.StateRestoring {
				break
			}
			if sb.State != store.StateReady || time.Now().After(deadline) {
				t.Fatalf("sandbox is %s, want to catch it restoring", sb.State)
			}
		}
		p.crash()
		<-done
		checkLedgers(t, st, "after the crash mid-restore")
		if sb, _ := st.Sandbox(ctx, id); sb.State != store.StateRestoring || sb.RestoreSnapshot != snap.ID {
			t.Fatalf("the crash left the sandbox %s restoring %q, want restoring %s", sb.State, sb.RestoreSnapshot, snap.ID)
		}
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(id, "ready", time.Minute)
		checkLedgers(t, st, "after the restart mid-restore")
		checkSnapshotLedgers(t, st, "after the restart mid-restore")
		if got := ledger(t, st, id); got != "compute:snapshot_restore storage:restored compute:open" {
			t.Fatalf("ledger after the restored restore: %q", got)
		}
		if got := execOut(t, p, id, "sha256sum -c big.sum >/dev/null && echo ok; ls after.txt 2>&1 >/dev/null | wc -l"); got != "ok\n1\n" {
			t.Fatalf("workspace after the restored restore: %q; want big back and after.txt gone", got)
		}
		if sb, _ := st.Sandbox(ctx, id); sb.RestoreSnapshot != "" {
			t.Fatalf("restore_snapshot left %q on a ready sandbox", sb.RestoreSnapshot)
		}
		p.stop()
	})
}
