package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

type jobArgs struct {
	Tag string `json:"tag"`
}

func (jobArgs) Kind() string { return "storetest_job" }

// jobWorker reports each tag it works. ran is buffered beyond what the
// test enqueues, so a worker never blocks on a test that has moved on.
type jobWorker struct {
	river.WorkerDefaults[jobArgs]
	ran chan string
}

func (w *jobWorker) Work(ctx context.Context, job *river.Job[jobArgs]) error {
	select {
	case w.ran <- job.Args.Tag:
	default:
	}
	return nil
}

var errRollback = errors.New("storetest: roll back")

func testRollback(t *testing.T, ctx context.Context, s store.Store) {
	err := s.InTx(ctx, func(tx store.Tx) error {
		sb := sandbox("a", "sb-1", t0)
		err := all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.UpsertAccount(ctx, account("a", 1)) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertSandbox(ctx, sb) },
			func(ctx context.Context, tx store.Tx) error {
				_, err := tx.OpenSession(ctx, session(sb, store.SessionCompute, t0))
				return err
			},
			func(ctx context.Context, tx store.Tx) error {
				return tx.InsertEvent(ctx, store.Event{SandboxID: sb.ID, AccountID: "a", Type: "state", At: t0})
			},
			func(ctx context.Context, tx store.Tx) error { return tx.Enqueue(ctx, jobArgs{Tag: "rolled-back"}, nil) },
		)
		if err != nil {
			return err
		}
		// Writes are visible inside the transaction before it ends.
		if _, err := tx.Sandbox(ctx, sb.ID); err != nil {
			return fmt.Errorf("read own write: %w", err)
		}
		return errRollback
	})
	wantErr(t, "InTx", err, errRollback)

	_, err = s.Account(ctx, "a")
	wantErr(t, "account after rollback", err, store.ErrNotFound)
	_, err = s.Sandbox(ctx, "sb-1")
	wantErr(t, "sandbox after rollback", err, store.ErrNotFound)
	sessions, err := s.Sessions(ctx, "sb-1")
	if err != nil {
		t.Fatalf("Sessions: %v", err)
	}
	wantEqual(t, "sessions after rollback", len(sessions), 0)
	events, err := s.Events(ctx, "sb-1", 0)
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	wantEqual(t, "events after rollback", len(events), 0)
	// The enqueued job is covered by testJobs, which works the queue.
}

// testConcurrentLimit is the quota race: many creates for one account at
// once must not exceed its limit.
func testConcurrentLimit(t *testing.T, ctx context.Context, s store.Store) {
	const limit, workers = 3, 20
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertAccount(ctx, account("a", limit)) })
	// The queue is worked meanwhile, so its polling and completions
	// compete for the database too (SQLite's single write lock).
	w := startWorker(t, s, workers)

	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			errs <- s.InTx(ctx, func(tx store.Tx) error {
				if err := tx.LockAccount(ctx, "a"); err != nil {
					return err
				}
				n, err := tx.CountHoldingPods(ctx, "a")
				if err != nil {
					return err
				}
				if n >= limit {
					return nil
				}
				if err := tx.InsertSandbox(ctx, sandbox("a", sbID(i), t0.Add(time.Duration(i)*time.Second))); err != nil {
					return err
				}
				return tx.Enqueue(ctx, jobArgs{Tag: sbID(i)}, nil)
			})
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent InTx: %v", err)
		}
	}
	list, err := s.Sandboxes(ctx, store.ListOptions{AccountID: "a"})
	if err != nil {
		t.Fatalf("Sandboxes: %v", err)
	}
	if len(list) != limit {
		t.Errorf("sandboxes after %d concurrent creates: got %d, want %d", workers, len(list), limit)
	}
	want := map[string]bool{}
	for _, sb := range list {
		want[sb.ID] = true
	}
	w.await(t, want)
}

// errOverLimit rolls back a create that LockAccountHolding found over
// the limit.
var errOverLimit = errors.New("over the limit")

// testConcurrentLimitLockLast is the quota race as lifecycle's Create
// runs it: each create inserts first and takes the account lock last,
// with the read in the same pipeline (LockAccountHolding), counting its
// own row. The read must see every create that held the lock before it,
// or more than the limit commit.
func testConcurrentLimitLockLast(t *testing.T, ctx context.Context, s store.Store) {
	const limit, workers = 3, 20
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertAccount(ctx, account("a", limit)) })
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i := range workers {
		wg.Go(func() {
			err := s.InTx(ctx, func(tx store.Tx) error {
				if err := tx.InsertSandbox(ctx, sandbox("a", sbID(i), t0.Add(time.Duration(i)*time.Second))); err != nil {
					return err
				}
				a, n, err := tx.LockAccountHolding(ctx, "a")
				if err != nil {
					return err
				}
				if a.ID != "a" || a.ConcurrentLimit != limit {
					return fmt.Errorf("LockAccountHolding read account %+v", a)
				}
				if n-1 >= limit {
					return errOverLimit
				}
				return nil
			})
			if errors.Is(err, errOverLimit) {
				err = nil
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent InTx: %v", err)
		}
	}
	list, err := s.Sandboxes(ctx, store.ListOptions{AccountID: "a"})
	if err != nil {
		t.Fatalf("Sandboxes: %v", err)
	}
	if len(list) != limit {
		t.Errorf("sandboxes after %d concurrent lock-last creates: got %d, want %d", workers, len(list), limit)
	}
}

// startWorker works the queue with a jobWorker until the test ends.
func startWorker(t *testing.T, s store.Store, buffer int, periodic ...*river.PeriodicJob) *jobWorker {
	t.Helper()
	w := &jobWorker{ran: make(chan string, buffer)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	if err := s.StartJobs(t.Context(), store.JobsConfig{Workers: workers, Periodic: periodic, MaxWorkers: 2}); err != nil {
		t.Fatalf("StartJobs: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.StopJobs(ctx); err != nil {
			t.Errorf("StopJobs: %v", err)
		}
	})
	return w
}

// await waits until every tag in want has run, failing on any other tag.
func (w *jobWorker) await(t *testing.T, want map[string]bool) {
	t.Helper()
	deadline := time.After(30 * time.Second)
	for len(want) > 0 {
		select {
		case tag := <-w.ran:
			if !want[tag] {
				t.Fatalf("job %q ran, want only %v", tag, want)
			}
			delete(want, tag)
		case <-deadline:
			t.Fatalf("jobs never ran: %v", want)
		}
	}
	// Give a wrongly committed job a moment to surface.
	select {
	case tag := <-w.ran:
		t.Errorf("unexpected job %q", tag)
	case <-time.After(500 * time.Millisecond):
	}
}

func testJobs(t *testing.T, ctx context.Context, s store.Store) {
	enqueue := func(tag string, fail bool) {
		t.Helper()
		err := s.InTx(ctx, func(tx store.Tx) error {
			if err := tx.Enqueue(ctx, jobArgs{Tag: tag}, nil); err != nil {
				return err
			}
			if fail {
				return errRollback
			}
			return nil
		})
		if fail {
			wantErr(t, "enqueue "+tag, err, errRollback)
		} else if err != nil {
			t.Fatalf("enqueue %s: %v", tag, err)
		}
	}
	// Jobs enqueued before any worker runs wait in the queue.
	enqueue("rolled-back", true)
	enqueue("before-start", false)

	periodic := river.NewPeriodicJob(river.PeriodicInterval(time.Hour),
		func() (river.JobArgs, *river.InsertOpts) { return jobArgs{Tag: "periodic"}, nil },
		&river.PeriodicJobOpts{RunOnStart: true})
	w := startWorker(t, s, 16, periodic)
	if err := s.StartJobs(ctx, store.JobsConfig{Workers: river.NewWorkers()}); err == nil {
		t.Errorf("second StartJobs: got nil error, want one")
	}

	enqueue("rolled-back-2", true)
	enqueue("after-start", false)

	// Rolled-back tags are absent from want, so await fails if they run.
	w.await(t, map[string]bool{"before-start": true, "after-start": true, "periodic": true})
}

type blockArgs struct{}

func (blockArgs) Kind() string { return "storetest_block" }

// blockWorker holds its job until the job's context ends.
type blockWorker struct {
	river.WorkerDefaults[blockArgs]
	started chan struct{}
}

func (w *blockWorker) Work(ctx context.Context, job *river.Job[blockArgs]) error {
	select {
	case w.started <- struct{}{}:
	default:
	}
	<-ctx.Done()
	return ctx.Err()
}

// testCloseStopsJobs closes a store whose caller forgot StopJobs while a
// job runs: Close must cancel the job and return, leaving no goroutine
// behind (the backends' TestMain runs goleak).
func testCloseStopsJobs(t *testing.T, ctx context.Context, s store.Store) {
	w := &blockWorker{started: make(chan struct{}, 1)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	if err := s.StartJobs(ctx, store.JobsConfig{Workers: workers}); err != nil {
		t.Fatalf("StartJobs: %v", err)
	}
	inTx(t, s, func(tx store.Tx) error { return tx.Enqueue(ctx, blockArgs{}, nil) })
	select {
	case <-w.started:
	case <-time.After(30 * time.Second):
		t.Fatal("blocking job never started")
	}
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Errorf("Close: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return while a job was running")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
