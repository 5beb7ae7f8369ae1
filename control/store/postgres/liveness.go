package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Liveness of job instances. A process whose job client runs under a
// fixed instance name holds a session advisory lock keyed by that name on
// a connection of its own for as long as the client runs. Postgres drops
// the lock with the connection, so a process killed with -9 frees it at
// once, while a paused one (SIGSTOP, a long GC) keeps it and is never
// taken over. Every such process sweeps: a job still running under a
// listed instance whose lock it can take is a dead process's, and goes
// back in the queue (reclaimSQL) for a live replica to run.

// sweepEvery is how often a process looks for dead instances' jobs.
const sweepEvery = 2 * time.Second

// lockStartWait bounds how long a starting process waits for its own
// instance lock: a sweeper of another replica holds it for a moment while
// it reclaims this instance's jobs from the previous run.
const lockStartWait = 10 * time.Second

const lockKey = `hashtextextended('sbx-jobs:' || $1, 0)`

// deadCandidatesSQL lists instances other than $1 that have running jobs.
const deadCandidatesSQL = `
SELECT DISTINCT i.instance FROM job_instances i
JOIN river_job j ON j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = i.instance
WHERE i.instance <> $1`

// instanceWatch holds this process's instance lock and sweeps for dead
// instances' jobs. stop releases the lock and ends the sweep.
type instanceWatch struct {
	pool     *pgxpool.Pool
	instance string
	log      *slog.Logger
	every    time.Duration
	// grace is how long an instance's lock must stay free before its
	// jobs are taken: a Postgres restart drops every connection, the live
	// holders' lock connections too, and each takes its lock again at its
	// next sweep (keepLock); only a process that never does is dead.
	grace  time.Duration
	conn   *pgxpool.Conn // holds the lock; replaced if it breaks
	cancel context.CancelFunc
	done   chan struct{}
	// freeSince is when each instance's lock was first seen free (sweep
	// goroutine only).
	freeSince map[string]time.Time
	// sweeps counts finished sweeps, so that a test can wait for some to
	// pass rather than guess their time.
	sweeps atomic.Int64
}

// acquireLock takes instance's lock on a connection of its own, trying
// for up to wait.
func acquireLock(ctx context.Context, pool *pgxpool.Pool, instance string, wait time.Duration) (*pgxpool.Conn, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("jobs instance %s: %w", instance, err)
	}
	deadline := time.Now().Add(wait)
	for {
		var got bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKey+`)`, instance).Scan(&got); err != nil {
			conn.Release()
			return nil, fmt.Errorf("jobs instance %s: lock: %w", instance, err)
		}
		if got {
			return conn, nil
		}
		if time.Now().After(deadline) {
			conn.Release()
			return nil, fmt.Errorf("jobs instance %s: another live process holds it (each replica needs its own --jobs-instance)", instance)
		}
		select {
		case <-ctx.Done():
			conn.Release()
			return nil, context.Cause(ctx)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// startInstanceWatch takes instance's lock (waiting up to lockStartWait)
// and registers the instance, then starts the sweep.
func startInstanceWatch(ctx context.Context, pool *pgxpool.Pool, instance string, log *slog.Logger, every time.Duration) (*instanceWatch, error) {
	conn, err := acquireLock(ctx, pool, instance, lockStartWait)
	if err != nil {
		return nil, err
	}
	if _, err := conn.Exec(ctx, `INSERT INTO job_instances (instance) VALUES ($1) ON CONFLICT DO NOTHING`, instance); err != nil {
		// Closing the connection, not releasing it: the lock goes with it.
		conn.Conn().Close(context.Background())
		conn.Release()
		return nil, fmt.Errorf("jobs instance %s: register: %w", instance, err)
	}
	sctx, cancel := context.WithCancel(context.Background())
	w := &instanceWatch{pool: pool, instance: instance, log: log, every: every, grace: 3 * every, conn: conn,
		cancel: cancel, done: make(chan struct{}), freeSince: map[string]time.Time{}}
	go w.sweepLoop(sctx)
	return w, nil
}

func (w *instanceWatch) sweepLoop(ctx context.Context) {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.keepLock(ctx)
		if err := w.sweep(ctx); err != nil && ctx.Err() == nil && w.log != nil {
			w.log.WarnContext(ctx, "jobs: sweep for dead instances failed", "err", err)
		}
		w.sweeps.Add(1)
	}
}

// keepLock takes the lock again on a new connection if its connection
// broke (a Postgres restart), before the others' grace runs out.
func (w *instanceWatch) keepLock(ctx context.Context) {
	if _, err := w.conn.Exec(ctx, `SELECT 1`); err == nil || ctx.Err() != nil {
		return
	}
	conn, err := acquireLock(ctx, w.pool, w.instance, w.every)
	if err != nil {
		if w.log != nil {
			w.log.ErrorContext(ctx, "jobs: lost this instance's lock and cannot take it again; another replica may take over its running jobs", "instance", w.instance, "err", err)
		}
		return
	}
	w.conn.Conn().Close(context.WithoutCancel(ctx))
	w.conn.Release()
	w.conn = conn
}

// sweep reclaims the running jobs of every listed instance whose lock is
// free. The lock is held while reclaiming, so the instance cannot start
// again (and begin jobs of its own) in between.
func (w *instanceWatch) sweep(ctx context.Context) error {
	rows, err := w.pool.Query(ctx, deadCandidatesSQL, w.instance)
	if err != nil {
		return err
	}
	var candidates []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			rows.Close()
			return err
		}
		candidates = append(candidates, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	var errs []error
	seen := map[string]bool{}
	for _, inst := range candidates {
		seen[inst] = true
		errs = append(errs, w.takeOver(ctx, inst))
	}
	for inst := range w.freeSince {
		if !seen[inst] {
			delete(w.freeSince, inst)
		}
	}
	return errors.Join(errs...)
}

func (w *instanceWatch) takeOver(ctx context.Context, inst string) error {
	conn, err := w.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	var free bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(`+lockKey+`)`, inst).Scan(&free); err != nil {
		return fmt.Errorf("check instance %s: %w", inst, err)
	}
	if !free {
		delete(w.freeSince, inst)
		return nil // alive
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(`+lockKey+`)`, inst)
	first, ok := w.freeSince[inst]
	if !ok {
		w.freeSince[inst] = time.Now()
		return nil
	}
	if time.Since(first) < w.grace {
		return nil // perhaps reconnecting after a Postgres restart
	}
	delete(w.freeSince, inst)
	tag, err := conn.Exec(ctx, reclaimSQL, inst, time.Now().UTC(), "the control running this job died ("+inst+"); taken over")
	if err != nil {
		return fmt.Errorf("reclaim jobs of dead instance %s: %w", inst, err)
	}
	if n := tag.RowsAffected(); n > 0 && w.log != nil {
		w.log.InfoContext(ctx, "jobs: requeued the running jobs of a dead instance", "instance", inst, "jobs", n)
	}
	return nil
}

// stop ends the sweep and releases the instance lock. Call it only once
// no job of this process is running any more.
func (w *instanceWatch) stop() {
	if w == nil {
		return
	}
	w.cancel()
	<-w.done
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := w.conn.Exec(ctx, `SELECT pg_advisory_unlock(`+lockKey+`)`, w.instance); err != nil {
		// The lock must not outlive us on a pooled connection.
		w.conn.Conn().Close(ctx)
	}
	w.conn.Release()
}
