package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

// promptRetry bounds how long after a restart the job a crashed run left
// running may take to run again: seconds, where River's stuck-job rescue
// alone takes its JobTimeout plus a minute (an hour here, where the
// suite sets no JobTimeout).
const promptRetry = 10 * time.Second

type crashArgs struct {
	Tag string `json:"tag"`
}

func (crashArgs) Kind() string { return "storetest_crash" }

// crashWorker reports each run as "tag#attempt" and holds a first attempt
// until release closes (or its context ends): a job in flight.
type crashWorker struct {
	river.WorkerDefaults[crashArgs]
	runs    chan<- string
	release <-chan struct{}
}

func (w *crashWorker) Work(ctx context.Context, job *river.Job[crashArgs]) error {
	select {
	case w.runs <- fmt.Sprintf("%s#%d", job.Args.Tag, job.Attempt):
	default:
	}
	if job.Attempt > 1 {
		return nil
	}
	select {
	case <-w.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// RunCrashRestart checks what StartJobs does with JobsConfig.Instance
// after a crash: a job that a dead run of the instance left running runs
// again within seconds of the instance's restart, while a job that
// another live instance is running is left alone. newDB returns a fresh
// empty database; openAt opens a store on it (each call a process of its
// own) and closes it when the test ends.
func RunCrashRestart(t *testing.T, newDB func(testing.TB) string, openAt func(t *testing.T, dsn string) store.Store) {
	ctx := t.Context()
	dsn := newDB(t)
	runs := make(chan string, 32)
	start := func(s store.Store, instance string, release <-chan struct{}) {
		t.Helper()
		w := river.NewWorkers()
		river.AddWorker(w, &crashWorker{runs: runs, release: release})
		if err := s.StartJobs(ctx, store.JobsConfig{Workers: w, Instance: instance}); err != nil {
			t.Fatalf("StartJobs as %s: %v", instance, err)
		}
	}
	enqueue := func(s store.Store, tag string) {
		t.Helper()
		inTx(t, s, func(tx store.Tx) error { return tx.Enqueue(ctx, crashArgs{Tag: tag}, nil) })
	}
	expect := func(want string, within time.Duration) {
		t.Helper()
		select {
		case got := <-runs:
			if got != want {
				t.Fatalf("job run: got %s, want %s", got, want)
			}
		case <-time.After(within):
			t.Fatalf("job run %s: none within %v", want, within)
		}
	}
	stop := func(s store.Store, who string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := s.StopJobs(ctx); err != nil {
			t.Errorf("StopJobs of %s: %v", who, err)
		}
	}

	// A run of instance ctl-1 takes job "a" and dies holding it: it
	// fetches nothing more and never records the outcome (its Stop gives
	// up waiting for the held job; the job is released only at the end,
	// when its outcome no longer applies).
	releaseA := make(chan struct{})
	a := openAt(t, dsn)
	start(a, "ctl-1", releaseA)
	enqueue(a, "a")
	expect("a#1", 30*time.Second)
	stopCtx, cancel := context.WithTimeout(ctx, time.Second)
	err := a.StopJobs(stopCtx)
	cancel()
	if err == nil {
		t.Fatal("StopJobs of the crashed run returned while its job was held")
	}

	// A live replica, ctl-2, is running job "c".
	releaseC := make(chan struct{})
	c := openAt(t, dsn)
	start(c, "ctl-2", releaseC)
	enqueue(c, "c")
	expect("c#1", 30*time.Second)

	// ctl-1's process is gone: its connections with it, and on Postgres
	// the instance lock its job client held (the store's StopJobs kept it,
	// its job still running).
	endSessionLocks(t, dsn, "ctl-1")

	// ctl-1 starts again: "a" runs again at once (here, or on ctl-2:
	// any live replica may take it); "c" is not touched.
	b := openAt(t, dsn)
	began := time.Now()
	start(b, "ctl-1", nil)
	expect("a#2", promptRetry)
	t.Logf("job left running by the crashed run ran again %v after the restart", time.Since(began).Round(time.Millisecond))
	select {
	case got := <-runs:
		t.Errorf("job run %s after the restart, want none (c belongs to a live replica)", got)
	case <-time.After(2 * time.Second):
	}

	stop(b, "the restarted run")
	close(releaseC)
	stop(c, "the live replica")
	close(releaseA)
	stop(a, "the crashed run")
	select {
	case got := <-runs:
		t.Errorf("job run %s while winding down, want none", got)
	default:
	}
}

// endSessionLocks ends, on Postgres, the sessions holding instance's job
// lock (control/store/postgres liveness.go), as a killed process's
// connections end; on SQLite there is no such lock.
func endSessionLocks(t *testing.T, dsn, instance string) {
	t.Helper()
	if !strings.HasPrefix(dsn, "postgres://") && !strings.HasPrefix(dsn, "postgresql://") {
		return
	}
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// An advisory lock on a bigint key shows in pg_locks as its high and
	// low 32 bits (classid, objid).
	if _, err := conn.Exec(t.Context(), `
SELECT pg_terminate_backend(l.pid) FROM pg_locks l
WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
  AND l.classid::bigint = (hashtextextended('sbx-jobs:' || $1, 0) >> 32) & 4294967295
  AND l.objid::bigint = hashtextextended('sbx-jobs:' || $1, 0) & 4294967295`, instance); err != nil {
		t.Fatal(err)
	}
}
