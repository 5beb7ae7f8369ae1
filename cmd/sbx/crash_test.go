package main

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// TestCrashKeepsLedgerExact kills control with SIGKILL right after state
// changes whose follow-up jobs have not run, restarts it, and checks that
// the work resumes and the ledger holds exactly one interval.
func TestCrashKeepsLedgerExact(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		dataDir := t.TempDir()

		// 1. Create with the job queue off: the sandbox row and its
		// provisioning job are committed, nothing runs. Crash.
		p := startDev(t, dataDir, dbURL, "--run-jobs=false")
		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); code != 201 {
			t.Fatalf("create: %d", code)
		}
		p.crash()

		// 2. Restart with jobs: the committed job provisions it.
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(sb.ID, "ready", 10*time.Second)
		p.crash() // crash while ready: the open interval must survive as is

		// 3. Restart with jobs off, delete (session closes in the same
		// transaction as the state change), crash before teardown.
		p = startDev(t, dataDir, dbURL, "--run-jobs=false")
		p.waitStatus(sb.ID, "ready", 5*time.Second)
		if code := p.call("DELETE", "/api/v1/sandboxes/"+sb.ID, nil, nil); code != 200 {
			t.Fatalf("delete: %d", code)
		}
		p.crash()

		// 4. Restart: the teardown job finishes the sandbox.
		p = startDev(t, dataDir, dbURL)
		p.waitStatus(sb.ID, "terminated", 10*time.Second)
		p.stop()

		st := openStore(t, dataDir, dbURL)
		sessions, err := st.Sessions(context.Background(), sb.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(sessions) != 1 || sessions[0].EndedAt == nil || sessions[0].EndReason != "explicit_delete" || sessions[0].Kind != store.SessionCompute {
			t.Fatalf("ledger after crashes = %+v, want exactly one closed compute interval (explicit_delete)", sessions)
		}
	})
}
