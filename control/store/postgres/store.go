// Package postgres is the production store.Store on PostgreSQL (pgx) with
// River as the durable job queue in the same database, so a state change,
// its ledger row and its follow-up job commit together.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/backend"
	"github.com/sbxedge/sbx/control/store/internal/jobqueue"
)

var _ store.Store = (*Store)(nil)

// Store is safe for concurrent use. Close must be called once the store is
// no longer used; it stops a job client still running.
type Store struct {
	queries
	pool   *pgxpool.Pool
	logger *slog.Logger
	// inserter is an insert-only River client: it never fetches jobs, so
	// Enqueue works whether or not this process works the queue.
	inserter *river.Client[pgx.Tx]

	jobs jobqueue.Runner[pgx.Tx]
	// watch is the job instance's lock and dead-instance sweep, while
	// jobs run under a fixed instance name.
	watchMu sync.Mutex
	watch   *instanceWatch

	listenOnce sync.Once // starts listen; Close consumes it too
	listen     listener

	closeOnce sync.Once
	closeErr  error
}

// defaultMaxConns is the pool's size unless the URL sets pool_max_conns:
// room for the API's concurrent transactions next to River's workers,
// well under Postgres's default max_connections of 100 for a replica or
// two.
const defaultMaxConns = 32

// Open connects to url, applies pending schema and River migrations, and
// returns a ready store.
func Open(ctx context.Context, url string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "store.postgres")
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse postgres url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		// pgxpool's default is max(4, CPUs): on a small host the API's
		// transactions, River's workers and its listener queue for
		// four connections, and a create spends most of its time
		// waiting for one (p50 245 ms at 16 concurrent creates on
		// 2 cores, against a few ms of work). The URL's
		// pool_max_conns still decides when given.
		cfg.MaxConns = defaultMaxConns
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping postgres: %w", err)
	}
	if err := migrate(ctx, pool, logger); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: jobqueue.Logger(logger)})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return &Store{
		queries:  newQueries(pool),
		pool:     pool,
		logger:   logger,
		inserter: inserter,
		jobs:     jobqueue.Runner[pgx.Tx]{Driver: riverpgxv5.New(pool), Logger: logger, Reclaim: reclaimer(pool)},
	}, nil
}

// InTx runs fn in a READ COMMITTED transaction; LockAccount and
// SandboxForUpdate provide the serialisation callers need.
func (s *Store) InTx(ctx context.Context, fn func(store.Tx) error) error {
	// Begin and commit fail on a lost connection as the statements do.
	var notify []string
	err := markUnavailable(pgx.BeginFunc(ctx, s.pool, func(ptx pgx.Tx) error {
		notify = notify[:0] // a retried fn starts over
		return fn(&tx{queries: newQueries(ptx), ptx: ptx, inserter: s.inserter, notify: &notify})
	}))
	if err == nil && len(notify) > 0 {
		s.notifyEvents(context.WithoutCancel(ctx), notify)
	}
	return err
}

// notifyEvents signals the committed events' sandboxes to every replica's
// listener. A failure is logged, not returned: the transaction committed,
// and subscribers re-read on their keep-alive tick (see tx.InsertEvent).
func (s *Store) notifyEvents(ctx context.Context, sandboxIDs []string) {
	if _, err := s.pool.Exec(ctx, `SELECT pg_notify($1, id) FROM unnest($2::text[]) AS id`, eventsChannel, sandboxIDs); err != nil {
		s.logger.Warn("notify committed events", "sandboxes", len(sandboxIDs), "err", err)
	}
}

// StartJobs starts a River client working the default queue; periodic
// jobs run on River's elected leader among replicas. The client runs
// until StopJobs or Close; ctx bounds only the start itself.
//
// With cfg.Instance, the process also holds that instance's lock while
// its client runs and takes over the running jobs of instances that died
// (liveness.go), so a replica killed mid-provisioning delays its jobs by
// seconds, not by River's stuck-job rescue.
func (s *Store) StartJobs(ctx context.Context, cfg store.JobsConfig) error {
	if cfg.Instance == "" {
		return s.jobs.Start(ctx, cfg)
	}
	w, err := startInstanceWatch(ctx, s.pool, cfg.Instance, s.logger, sweepEvery)
	if err != nil {
		return fmt.Errorf("start jobs: %w", err)
	}
	if err := s.jobs.Start(ctx, cfg); err != nil {
		w.stop()
		return err
	}
	s.watchMu.Lock()
	s.watch = w
	s.watchMu.Unlock()
	return nil
}

// StopJobs stops fetching and waits for running jobs or for ctx.
func (s *Store) StopJobs(ctx context.Context) error {
	if err := s.jobs.Stop(ctx); err != nil {
		return err // jobs may still run: keep the instance's lock
	}
	s.stopWatch()
	return nil
}

// stopWatch releases the instance lock once no job of ours runs.
func (s *Store) stopWatch() {
	s.watchMu.Lock()
	w := s.watch
	s.watch = nil
	s.watchMu.Unlock()
	w.stop()
}

// Close stops a job client that is still running (cancelling its jobs) and
// closes the pool. It returns once no goroutine of the store remains.
// Later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = s.jobs.Close()
		s.stopWatch()
		s.stopListener()
		s.pool.Close()
	})
	return s.closeErr
}

type tx struct {
	queries
	ptx      pgx.Tx
	inserter *river.Client[pgx.Tx]
	notify   *[]string // sandboxes with events, signalled after commit
}

var _ store.Tx = (*tx)(nil)

func (t *tx) Enqueue(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error {
	if _, err := t.inserter.InsertTx(ctx, t.ptx, args, opts); err != nil {
		return fmt.Errorf("enqueue %s: %w", args.Kind(), err)
	}
	return nil
}

// lockAccountSQL takes account $1's lock. hashtextextended gives a 64-bit
// key, so two accounts rarely share a lock; a collision only serialises
// them, it never breaks correctness.
const lockAccountSQL = "SELECT pg_advisory_xact_lock(hashtextextended('sbx.account:' || $1, 0))"

func (t *tx) LockAccount(ctx context.Context, accountID string) error {
	if _, err := t.ptx.Exec(ctx, lockAccountSQL, accountID); err != nil {
		return fmt.Errorf("lock account %s: %w", accountID, err)
	}
	return nil
}

// countLiveNowSQL applies this transaction's changes to the account's
// live-sandbox counter at once instead of at commit (migration 0022's
// deferred triggers), so that the count read after it includes them (a
// create's own insert, a recreate's end of its predecessor). Run under
// the account lock only: the counter row's lock it may take is then held
// until commit, which every create in the account waits for anyway, and
// taken before the account lock it could deadlock with a create that
// holds the account lock and updates the counter at its commit.
const countLiveNowSQL = `SET CONSTRAINTS sandboxes_live_insert, sandboxes_live_update, sandboxes_live_delete IMMEDIATE`

// LockAccountHolding sends the lock and the read as one pipeline. The
// server runs them in order and the read's snapshot is taken when it
// starts (READ COMMITTED), after the lock is granted: it sees every
// transaction that held the lock before, as separate round trips would.
// The count is one row (account_live_sandboxes), which countLiveNowSQL
// brings up to date with this transaction's own changes first.
func (t *tx) LockAccountHolding(ctx context.Context, accountID string) (store.Account, int, error) {
	b := &pgx.Batch{}
	b.Queue(lockAccountSQL, accountID)
	b.Queue(countLiveNowSQL)
	b.Queue(backend.AccountHoldingSQL, accountID)
	br := t.ptx.SendBatch(ctx, b)
	for range 2 {
		if _, err := br.Exec(); err != nil {
			_ = br.Close()
			return store.Account{}, 0, fmt.Errorf("lock account %s: %w", accountID, markUnavailable(err))
		}
	}
	a, n, err := t.ScanAccountHolding(br.QueryRow(), accountID)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return store.Account{}, 0, fmt.Errorf("admit: %w", markUnavailable(err))
	}
	return a, n, nil
}
