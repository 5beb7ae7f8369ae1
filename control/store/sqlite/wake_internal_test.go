package sqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

type wakeArgs struct{ Queue string }

func (wakeArgs) Kind() string { return "test.wake" }

type wakeWorker struct {
	river.WorkerDefaults[wakeArgs]
	ran chan string
}

func (w *wakeWorker) Work(_ context.Context, job *river.Job[wakeArgs]) error {
	w.ran <- job.Args.Queue
	return nil
}

// TestCommitWakesJobs: a job enqueued in a transaction runs once it
// commits, without waiting for the fetch poll (here an hour), on the
// default queue and on another queue the process works.
func TestCommitWakesJobs(t *testing.T) {
	ctx := t.Context()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "sbx.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	s.jobs.Tune = func(c *river.Config) { c.FetchPollInterval, c.FetchCooldown = time.Hour, fetchCooldown }
	w := &wakeWorker{ran: make(chan string, 4)}
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	if err := s.StartJobs(ctx, store.JobsConfig{Workers: workers, Queues: []string{"other"}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.StopJobs(context.Background()) })
	// River's first fetch at start finds nothing; what follows is woken.
	time.Sleep(50 * time.Millisecond)

	for _, queue := range []string{river.QueueDefault, "other"} {
		err := s.InTx(ctx, func(tx store.Tx) error {
			return tx.Enqueue(ctx, wakeArgs{Queue: queue}, &river.InsertOpts{Queue: queue})
		})
		if err != nil {
			t.Fatal(err)
		}
		// A hang detector, not a speed check: without the wake the job
		// waits for the hour's poll.
		select {
		case got := <-w.ran:
			if got != queue {
				t.Fatalf("ran the job of queue %q, want %q", got, queue)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the job committed on queue %q did not run: the commit did not wake the client", queue)
		}
	}
}
