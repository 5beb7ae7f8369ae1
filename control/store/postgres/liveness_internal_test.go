package postgres

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// TestDeadInstanceJobsTakenOver: a job left running by an instance whose
// process is gone (its lock free) goes back in the queue within a few
// sweeps; one whose process lives (lock held) is never touched, and a
// second process cannot start under a live instance's name.
func TestDeadInstanceJobsTakenOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	s, err := Open(ctx, testdb.Postgres(t), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	running := func(instance string) int64 {
		t.Helper()
		var id int64
		if err := s.pool.QueryRow(ctx, `INSERT INTO river_job (kind, args, state, attempt, max_attempts, attempted_at, attempted_by)
			VALUES ('provision', '{}', 'running', 1, 5, now(), ARRAY[$1]) RETURNING id`, instance).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	state := func(id int64) string {
		t.Helper()
		var st string
		if err := s.pool.QueryRow(ctx, `SELECT state FROM river_job WHERE id = $1`, id).Scan(&st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	waitState := func(id int64, want string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); state(id) != want; {
			if time.Now().After(deadline) {
				t.Fatalf("job %d is %s after 20 s, want %s", id, state(id), want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// A process that ran as "dead" registered and left a job running,
	// then died: its lock is free.
	if _, err := s.pool.Exec(ctx, `INSERT INTO job_instances (instance) VALUES ('dead')`); err != nil {
		t.Fatal(err)
	}
	deadJob := running("dead")
	// A job client without a fixed instance is never judged: it has no lock.
	unlisted := running("host_2026_11_28T17_00_00_000001")

	live, err := startInstanceWatch(ctx, s.pool, "live", nil, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	liveStopped := false
	defer func() {
		if !liveStopped {
			live.stop()
		}
	}()
	liveJob := running("live")

	sweeper, err := startInstanceWatch(ctx, s.pool, "sweeper", nil, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer sweeper.stop()

	waitState(deadJob, "available")
	var lastErr string
	if err := s.pool.QueryRow(ctx, `SELECT errors[cardinality(errors)]->>'error' FROM river_job WHERE id = $1`, deadJob).Scan(&lastErr); err != nil || !strings.Contains(lastErr, "dead") {
		t.Fatalf("the reclaimed job's attempt error = %q, %v; want one naming the dead instance", lastErr, err)
	}
	// Several more sweeps: the live and the unlisted jobs stay running.
	waitSweeps(t, sweeper, 10)
	if st := state(liveJob); st != "running" {
		t.Fatalf("a live instance's job was taken: %s", st)
	}
	if st := state(unlisted); st != "running" {
		t.Fatalf("an unlisted client's job was taken: %s", st)
	}

	// A second process under the live instance's name is refused.
	short, shortCancel := context.WithTimeout(ctx, time.Second)
	defer shortCancel()
	if w, err := startInstanceWatch(short, s.pool, "live", nil, time.Hour); err == nil {
		w.stop()
		t.Fatal("a second process started under a live instance's name")
	}

	// The live process stops without finishing its job (as a kill would
	// leave it): the job is taken over.
	live.stop()
	liveStopped = true
	waitState(liveJob, "available")

	// A live process whose lock connection breaks (a Postgres restart
	// drops them all) takes its lock again before the others' grace runs
	// out: its job is not taken.
	phoenix, err := startInstanceWatch(ctx, s.pool, "phoenix", nil, 10*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer phoenix.stop()
	phoenixJob := running("phoenix")
	var ended int
	if err := s.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(l.pid)) FROM pg_locks l
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.classid::bigint = (hashtextextended('sbx-jobs:phoenix', 0) >> 32) & 4294967295
		  AND l.objid::bigint = hashtextextended('sbx-jobs:phoenix', 0) & 4294967295`).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("ending phoenix's lock session: %d ended, %v; want 1", ended, err)
	}
	waitSweeps(t, sweeper, 30) // ten times the sweeper's grace
	if st := state(phoenixJob); st != "running" {
		t.Fatalf("the job of a live instance whose lock connection broke was taken: %s", st)
	}
}

// waitSweeps waits until w has finished n more sweeps.
func waitSweeps(t *testing.T, w *instanceWatch, n int64) {
	t.Helper()
	want := w.sweeps.Load() + n
	for deadline := time.Now().Add(20 * time.Second); w.sweeps.Load() < want; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d sweeps after 20 s", n-(want-w.sweeps.Load()), n)
		}
	}
}
