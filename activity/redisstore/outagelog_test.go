package redisstore_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/activity/redisstore"
	"github.com/sbxedge/sbx/internal/testkit/redistest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestOutageLoggedOnce: while Redis is down the flush loop fails at
// every tick; the log says so once, and once more when a flush succeeds
// again (seen under `sbx dev` with its Redis stopped for 30 s: a WARN
// line a second).
func TestOutageLoggedOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	var logs sshscenario.SyncBuffer
	s := newStore(t, redisstore.Config{Client: client(t, srv.Addr), FlushInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})

	srv.Kill()
	waitFor(t, "five failed flushes", func() bool { s.Mark("sbx-1"); return s.Stats().FlushErrors >= 5 })
	got := logs.String()
	if strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "activity flush failed") {
		t.Errorf("%d failed flushes logged:\n%s\nwant one WARN line", s.Stats().FlushErrors, got)
	}
	srv.Restart()
	seen := len(got)
	waitFor(t, "the recovery logged", func() bool { got = logs.String()[seen:]; return strings.Contains(got, "succeeded again") })
	if strings.Count(got, "level=INFO") != 1 || strings.Count(got, "activity flush failed") != 0 {
		t.Errorf("recovery logged:\n%s\nwant one INFO line and no more failures", got)
	}
}

// waitFor polls cond until it holds, for up to ten seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
