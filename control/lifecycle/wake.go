package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

// ErrCannotWake is returned by Wake for a sandbox that has ended or failed.
var ErrCannotWake = errors.New("sandbox cannot be woken")

// RestoreArgs asks for a restoring sandbox's workspace and server to come
// back.
type RestoreArgs struct {
	SandboxID string `json:"sandbox_id"`
}

// Kind implements river.JobArgs.
func (RestoreArgs) Kind() string { return "sandbox.restore" }

// InsertOpts: however many wakers, only the one that moves the sandbox
// to restoring enqueues this, so it needs no uniqueness (see SuspendArgs).
func (RestoreArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5}
}

// wakeRecheck bounds how long a waiter relies on notifications alone: if
// one is lost (Redis restarting), the waiter re-reads state this often.
// Notifications, not this, are how waiters normally learn of ready.
const wakeRecheck = 5 * time.Second

// Wake returns once the sandbox is ready, restoring it if it is
// suspended. Any number of concurrent callers, in any number of replicas,
// cause one restore: the first moves suspended -> restoring and restores
// it in its own goroutine (see restoreInline); everyone else waits for
// the state-change notification. It returns
// ErrNotFound for an unknown sandbox, ErrCannotWake (wrapped in a
// StateError) for one that ended, and ctx's error when ctx ends first.
func (m *Manager) Wake(ctx context.Context, id string) error {
	ch, cancel := m.subscribe(id) // before reading state, so no change is missed
	defer cancel()
	if m.act != nil {
		m.act.Mark(id)
	}
	for {
		sb, err := m.store.Sandbox(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return ErrNotFound
		}
		if err != nil {
			return fmt.Errorf("wake %s: %w", id, err)
		}
		switch sb.State {
		case store.StateReady:
			return nil
		case store.StateSuspended:
			won, err := m.beginRestore(ctx, id)
			if err != nil {
				return err
			}
			if won {
				m.restoreInline(ctx, id)
			}
			continue // re-read: ready now, restoring, or changed again
		case store.StatePending, store.StateSuspending, store.StateRestoring:
		default:
			return fmt.Errorf("wake %s: %w: %w", id, ErrCannotWake, &StateError{State: string(sb.State), Action: "wake"})
		}
		t := time.NewTimer(wakeRecheck)
		select {
		case <-ch:
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("wake %s: %w", id, context.Cause(ctx))
		}
		t.Stop()
	}
}

// beginRestore moves a suspended sandbox to restoring, once the account
// rules admit it (ErrLimit and friends are returned to the waker), and in
// the same transaction enqueues the restore job as a backstop, scheduled
// restoreBackstop out. won reports whether this caller made the move and
// so must restore; losing the race to another waker is fine.
func (m *Manager) beginRestore(ctx context.Context, id string) (won bool, err error) {
	changed, _, err := m.transition(ctx, id, step{
		from: store.StateSuspended, to: store.StateRestoring, reason: ReasonWake, actor: "waker",
		job: RestoreArgs{SandboxID: id},
		// River schedules by the wall clock, not the injected one.
		jobOpts: &river.InsertOpts{ScheduledAt: time.Now().Add(m.restoreBackstop())},
		// A restoring sandbox counts against the account's limit again.
		apply: func(tx store.Tx, sb *store.Sandbox, _ time.Time) error {
			return m.Admit(ctx, tx, sb.AccountID, sb.Platform)
		},
	})
	if err != nil {
		return false, fmt.Errorf("begin restore of %s: %w", id, err)
	}
	if changed {
		m.log.InfoContext(ctx, "waking sandbox", "sandbox_id", id)
	}
	return changed, nil
}

// restoreBackstop is how long after a wake the durable restore job looks
// at the sandbox. It does the restore only if the sandbox is still
// restoring then, i.e. the waker's process died mid-restore. It is later
// than an inline attempt may last (ProvisionTimeout), so the two do not
// overlap; a restore is idempotent in every provider should they.
func (m *Manager) restoreBackstop() time.Duration {
	return m.cfg.ProvisionTimeout + time.Minute
}

// restoreInline makes the first restore attempt in the winning waker's
// goroutine, so a wake does not wait for a job worker to fetch the job
// (up to SQLite's fetch poll interval, or River's fetch cooldown after a
// Postgres notification). It is detached from ctx's cancellation, since a
// client hanging up must not leave the sandbox restoring until the
// backstop, and bounded by ProvisionTimeout. A failed attempt hands over
// to a job enqueued now, which retries with backoff and finally returns
// the sandbox to suspended.
func (m *Manager) restoreInline(ctx context.Context, id string) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.ProvisionTimeout)
	defer cancel()
	err := m.restore(rctx, id, 1, false)
	if err == nil {
		return
	}
	m.log.WarnContext(ctx, "inline restore failed; a job retries it", "sandbox_id", id, "err", err)
	err = m.store.InTx(rctx, func(tx store.Tx) error {
		return tx.Enqueue(rctx, RestoreArgs{SandboxID: id}, nil)
	})
	if err != nil {
		m.log.ErrorContext(ctx, "enqueue restore retry; the backstop job restores later", "sandbox_id", id, "err", err)
	}
}

type restoreWorker struct {
	river.WorkerDefaults[RestoreArgs]
	m *Manager
}

func (w *restoreWorker) NextRetry(job *river.Job[RestoreArgs]) time.Time {
	return time.Now().Add(retryBackoff(job.Attempt))
}

func (w *restoreWorker) Timeout(*river.Job[RestoreArgs]) time.Duration {
	return w.m.cfg.ProvisionTimeout
}

// Work restores the workspace and server, then in one transaction closes
// the storage line, opens a compute line and marks the sandbox ready. A
// restore that keeps failing puts the sandbox back to suspended (snapshot
// intact), so a later wake tries again.
func (w *restoreWorker) Work(ctx context.Context, job *river.Job[RestoreArgs]) error {
	return w.m.restore(ctx, job.Args.SandboxID, job.Attempt, job.Attempt >= job.MaxAttempts)
}

// restore restores a restoring sandbox (see restoreWorker.Work); a
// sandbox in any other state is left alone. attempt is for the log; when
// last, a failure returns the sandbox to suspended.
func (m *Manager) restore(ctx context.Context, id string, attempt int, last bool) error {
	sb, ok, err := m.jobSandbox(ctx, id, store.StateRestoring)
	if !ok {
		return err
	}
	sus, can := m.suspender()
	if !can {
		return river.JobCancel(fmt.Errorf("restore %s: provider cannot restore", id))
	}
	spec, _, err := m.spec(ctx, sb)
	if err != nil {
		return err
	}
	start := time.Now()
	ep, err := sus.Restore(ctx, spec)
	if err != nil {
		m.log.WarnContext(ctx, "restore attempt failed", "sandbox_id", id, "attempt", attempt, "err", err)
		if last {
			return m.restoreFailed(ctx, id, err)
		}
		return fmt.Errorf("restore %s: %w", id, err)
	}
	took := time.Since(start)
	if m.conns != nil {
		m.conns.Forget(id) // the endpoint may have moved
	}
	changed, state, err := m.transition(ctx, id, step{
		from: store.StateRestoring, to: store.StateReady, reason: ReasonWake, actor: "restorer",
		apply: func(tx store.Tx, cur *store.Sandbox, now time.Time) error {
			return m.resume(ctx, tx, cur, ep, now, ReasonRestored)
		},
	})
	if err != nil {
		return fmt.Errorf("mark %s ready after restore: %w", id, err)
	}
	if state == store.StateTerminating || state.Final() {
		// Deleted while restoring: the terminate job may already have run,
		// so release what the restore started.
		if err := m.prov.Destroy(ctx, id); err != nil {
			return fmt.Errorf("destroy %s restored after it ended: %w", id, err)
		}
		return nil
	}
	if changed {
		m.metrics.restores.Inc()
		m.metrics.restoreSeconds.Observe(took.Seconds())
		m.log.InfoContext(ctx, "sandbox woken", "sandbox_id", id, "restore_took", took)
	}
	return nil
}

func (m *Manager) restoreFailed(ctx context.Context, id string, cause error) error {
	_, _, err := m.transition(ctx, id, step{
		from: store.StateRestoring, to: store.StateSuspended, reason: "restore_failed", actor: "restorer",
		message: cause.Error(),
	})
	if err != nil {
		return fmt.Errorf("return %s to suspended: %w", id, err)
	}
	m.log.ErrorContext(ctx, "restore failed; sandbox stays suspended", "sandbox_id", id, "err", cause)
	return nil
}
