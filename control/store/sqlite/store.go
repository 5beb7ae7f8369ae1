// Package sqlite is the store.Store for `sbx dev`: one SQLite file (pure Go
// driver, no cgo) holding control's state and River's job queue.
//
// Every transaction begins with BEGIN IMMEDIATE (the _txlock DSN option),
// taking SQLite's single write lock up front. Transactions are therefore
// serialised, which is what makes "count live, then insert" race-free and
// why LockAccount has nothing to do; WAL lets reads outside a transaction
// proceed meanwhile. Inside InTx, read through the Tx: a read through the
// Store itself needs a second connection, and under write contention all
// of them may be waiting for the lock that transaction holds.
package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riversqlite"
	_ "modernc.org/sqlite" // registers the "sqlite" database/sql driver

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/internal/jobqueue"
	"github.com/sbxedge/sbx/internal/fanout"
)

var _ store.Store = (*Store)(nil)

const (
	// busyTimeout is how long a connection waits for the write lock before
	// SQLITE_BUSY; generous because writers queue on BEGIN IMMEDIATE.
	busyTimeout = 30 * time.Second
	// maxConns is small: writes are serialised by SQLite anyway, and a few
	// connections let WAL readers (and a read issued inside a caller's
	// transaction through the Store) run while a writer holds the lock.
	maxConns = 4
	// fetchPollInterval is the backup for the in-process wake
	// (jobqueue.Wake), which starts a job committed by this process at
	// once: the poll finds jobs another process inserted (`sbx admin`)
	// and scheduled ones coming due.
	fetchPollInterval = 200 * time.Millisecond
	// fetchCooldown is the least time between two fetches; River's
	// default (100 ms) would floor the poll above. Fetches a job's end
	// triggers are bounded by it too.
	fetchCooldown = 5 * time.Millisecond
)

// Store is safe for concurrent use. Close must be called once the store is
// no longer used; it stops a job client still running.
type Store struct {
	queries
	db     *sql.DB
	logger *slog.Logger
	// inserter is an insert-only River client: it never fetches jobs, so
	// Enqueue works whether or not this process works the queue.
	inserter *river.Client[*sql.Tx]
	jobs     jobqueue.Runner[*sql.Tx]
	// events signals event streams after commit. SQLite has no
	// cross-process notification; `sbx dev` is one process.
	events fanout.Hub

	closeOnce sync.Once
	closeErr  error

	warmMu sync.Mutex // held while the warm pool replenishes
}

func dsn(path string) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "foreign_keys(1)")
	// NORMAL is durable across application crashes in WAL mode; only an OS
	// crash may lose the last transactions, acceptable for a dev store.
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Set("_txlock", "immediate")
	return path + "?" + q.Encode()
}

// Open opens (creating if needed) the database file at path, applies
// pending schema and River migrations, and returns a ready store.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Store, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger = logger.With("component", "store.sqlite")
	if path == "" || strings.ContainsAny(path, "?#") || strings.HasPrefix(path, ":memory:") {
		// Each pooled connection to :memory: would be its own database.
		return nil, fmt.Errorf("open sqlite: %q must name a file", path)
	}
	db, err := sql.Open("sqlite", dsn(path))
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := migrate(ctx, db, logger); err != nil {
		db.Close()
		return nil, fmt.Errorf("migrate %s: %w", path, err)
	}
	inserter, err := river.NewClient(riversqlite.New(db), &river.Config{Logger: jobqueue.Logger(logger)})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("river insert client: %w", err)
	}
	return &Store{
		queries:  newQueries(db),
		db:       db,
		logger:   logger,
		inserter: inserter,
		jobs: jobqueue.Runner[*sql.Tx]{
			Driver:  riversqlite.New(db),
			Logger:  logger,
			Tune:    func(c *river.Config) { c.FetchPollInterval, c.FetchCooldown = fetchPollInterval, fetchCooldown },
			Reclaim: reclaimer(db),
			Wake:    new(jobqueue.Wake),
		},
	}, nil
}

// InTx runs fn in an IMMEDIATE transaction (see the package comment). A
// write refused for want of disk space, in fn or at commit, matches
// store.ErrFull.
func (s *Store) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return markFull(s.inTx(ctx, fn))
}

func (s *Store) inTx(ctx context.Context, fn func(store.Tx) error) error {
	stx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	committed := false
	defer func() {
		// Also runs when fn panics, so the write lock is never left held.
		// The rollback error is dropped: fn's error explains what happened.
		if !committed {
			_ = stx.Rollback()
		}
	}()
	t := &tx{queries: newQueries(stx), stx: stx, inserter: s.inserter}
	if err := fn(t); err != nil {
		return err
	}
	if err := stx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	committed = true
	if t.enqueued {
		s.jobs.Wake.Nudge()
	}
	for _, id := range t.eventSandboxes {
		s.events.Notify(id)
	}
	return nil
}

// SubscribeEvents implements store.Store; signals are sent after commit.
func (s *Store) SubscribeEvents(sandboxID string) (<-chan struct{}, func()) {
	return s.events.Subscribe(sandboxID)
}

// StartJobs starts a River client working the default queue, polling since
// SQLite has no LISTEN/NOTIFY. The client runs until StopJobs or Close;
// ctx bounds only the start itself.
func (s *Store) StartJobs(ctx context.Context, cfg store.JobsConfig) error {
	return s.jobs.Start(ctx, cfg)
}

// StopJobs stops fetching and waits for running jobs or for ctx.
func (s *Store) StopJobs(ctx context.Context) error { return s.jobs.Stop(ctx) }

// Close stops a job client that is still running (cancelling its jobs) and
// closes the database. Later calls return the first call's result.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		err := s.jobs.Close()
		if cerr := s.db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close sqlite: %w", cerr)
		}
		s.closeErr = err
	})
	return s.closeErr
}

type tx struct {
	queries
	stx      *sql.Tx
	inserter *river.Client[*sql.Tx]
	// eventSandboxes are the sandboxes InsertEvent wrote for, signalled
	// once the transaction commits.
	eventSandboxes []string
	// enqueued says a job was inserted: the job client is woken once the
	// transaction commits.
	enqueued bool
}

var _ store.Tx = (*tx)(nil)

func (t *tx) Enqueue(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error {
	if _, err := t.inserter.InsertTx(ctx, t.stx, args, opts); err != nil {
		return fmt.Errorf("enqueue %s: %w", args.Kind(), err)
	}
	t.enqueued = true
	return nil
}

// LockAccount has nothing to do: the transaction already holds the
// database's only write lock.
func (t *tx) LockAccount(ctx context.Context, accountID string) error { return nil }
