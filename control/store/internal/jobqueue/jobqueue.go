// Package jobqueue owns the River client that works a store's job queue,
// shared by the Postgres and SQLite backends.
package jobqueue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/sbxedge/sbx/control/store"
)

// DefaultMaxWorkers is used when JobsConfig.MaxWorkers is not set.
const DefaultMaxWorkers = 10

// closeTimeout bounds how long Close waits for jobs a caller forgot to
// stop; their contexts are cancelled first.
const closeTimeout = 10 * time.Second

// Runner starts and stops at most one working client at a time.
type Runner[TTx any] struct {
	Driver riverdriver.Driver[TTx]
	Logger *slog.Logger
	// Tune, when set, adjusts the client config before the client is
	// built (SQLite polls faster, having no LISTEN/NOTIFY).
	Tune func(*river.Config)
	// Reclaim puts back in the queue every job still `running` whose last
	// attempt was by the client clientID, in one statement that touches
	// no other job: as available (keeping its place in line), or as
	// discarded past its last attempt, or cancelled if a cancel was asked;
	// each gets an attempt error saying why, dated at. It returns how many
	// it changed. Required for JobsConfig.Instance.
	Reclaim func(ctx context.Context, clientID string, at time.Time) (int64, error)
	// Wake, when set, is how the store tells the client of jobs it
	// committed, for a database without LISTEN/NOTIFY (see Wake).
	Wake *Wake

	mu     sync.Mutex // guards client
	client *river.Client[TTx]
}

// Config maps cfg onto River's config: the default queue and cfg's other
// queues with cfg's worker count, plus cfg's workers, periodic jobs and retry policy.
func Config(cfg store.JobsConfig, logger *slog.Logger) *river.Config {
	maxWorkers := cfg.MaxWorkers
	if maxWorkers <= 0 {
		maxWorkers = DefaultMaxWorkers
	}
	workers := cfg.Workers
	if workers == nil {
		workers = river.NewWorkers()
	}
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: maxWorkers}}
	for _, q := range cfg.Queues {
		queues[q] = river.QueueConfig{MaxWorkers: maxWorkers}
	}
	return &river.Config{
		Logger:       Logger(logger),
		Workers:      workers,
		PeriodicJobs: cfg.Periodic,
		Queues:       queues,
		RetryPolicy:  cfg.RetryPolicy,
		JobTimeout:   cfg.JobTimeout,
		// A job whose outcome could not be written (the database went
		// away as it finished) stays `running`; River's default rescue
		// waits an hour. Our workers are idempotent (each re-reads the
		// sandbox's state), so one that has outlived its timeout is
		// safe to run again soon after.
		RescueStuckJobsAfter: rescueAfter(cfg.JobTimeout),
	}
}

// rescueMargin is how long past its timeout a job may still be finishing
// (writing its outcome) before it counts as stuck.
const rescueMargin = time.Minute

func rescueAfter(jobTimeout time.Duration) time.Duration {
	if jobTimeout <= 0 {
		return 0 // River's default
	}
	return jobTimeout + rescueMargin
}

// Start builds and starts the client. It runs until Stop or Close; ctx
// bounds only the start, so a request-scoped context cannot end the queue.
func (r *Runner[TTx]) Start(ctx context.Context, cfg store.JobsConfig) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client != nil {
		return errors.New("start jobs: already started")
	}
	rc := Config(cfg, r.Logger)
	if r.Tune != nil {
		r.Tune(rc)
	}
	if cfg.Instance != "" {
		// Before this client starts, no job of this process runs under
		// the instance's ID (Stop waited for them, or Start refused
		// above); any still marked running is a dead run's.
		rc.ID = cfg.Instance
		if err := r.reclaim(ctx, cfg.Instance); err != nil {
			return err
		}
	}
	driver := r.Driver
	if r.Wake != nil {
		driver = wakeDriver[TTx]{Driver: r.Driver, wake: r.Wake, queues: slices.Sorted(maps.Keys(rc.Queues))}
	}
	client, err := river.NewClient(driver, rc)
	if err != nil {
		return fmt.Errorf("start jobs: new river client: %w", err)
	}
	if err := client.Start(context.WithoutCancel(ctx)); err != nil {
		return fmt.Errorf("start jobs: %w", err)
	}
	r.client = client
	return nil
}

// reclaim puts back in the queue the jobs an earlier run of instance left
// running, so they are retried now rather than after the stuck-job rescue.
func (r *Runner[TTx]) reclaim(ctx context.Context, instance string) error {
	if r.Reclaim == nil {
		return errors.New("start jobs: instance given, but the store cannot reclaim its jobs")
	}
	n, err := r.Reclaim(ctx, instance, time.Now().UTC())
	if err != nil {
		return fmt.Errorf("start jobs: reclaim jobs left running by %s: %w", instance, err)
	}
	if n > 0 && r.Logger != nil {
		r.Logger.InfoContext(ctx, "requeued jobs an earlier run left running", "instance", instance, "jobs", n)
	}
	return nil
}

// ReclaimError is the attempt error Reclaim records on each job it puts
// back.
const ReclaimError = "left running by an earlier run of this instance; requeued at its restart"

// Stop stops fetching and waits for running jobs or for ctx. After an
// error the client is still running and Stop may be called again.
func (r *Runner[TTx]) Stop(ctx context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		return nil
	}
	if err := r.client.Stop(ctx); err != nil {
		return fmt.Errorf("stop jobs: %w", err)
	}
	r.client = nil
	return nil
}

// Close stops a client that is still running, cancelling its jobs, and
// returns once its goroutines are gone (or closeTimeout passed).
func (r *Runner[TTx]) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.client == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if err := r.client.StopAndCancel(ctx); err != nil {
		return fmt.Errorf("stop jobs on close: %w", err)
	}
	r.client = nil
	return nil
}

// Migrate brings River's own tables on driver's database up to date; each
// backend runs it after its schema migrations.
func Migrate[TTx any](ctx context.Context, driver riverdriver.Driver[TTx], logger *slog.Logger) error {
	migrator, err := rivermigrate.New(driver, &rivermigrate.Config{Logger: Logger(logger)})
	if err != nil {
		return fmt.Errorf("river migrator: %w", err)
	}
	if _, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil); err != nil {
		return fmt.Errorf("river migrations: %w", err)
	}
	return nil
}
