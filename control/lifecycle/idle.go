package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// Activity is the subset of an activity store lifecycle uses: the idle
// detector reads it, wakes mark it, and state changes are published on it.
type Activity interface {
	Mark(sandboxID string)
	Status(ctx context.Context, ids []string) (map[string]activity.Status, error)
	Publish(ctx context.Context, sandboxID string) error
	Subscribe(sandboxID string) (<-chan struct{}, func())
}

// Reasons recorded on ledger lines and events by idle offload.
const (
	ReasonIdleOffload   = "idle_offload"
	ReasonSuspendFailed = "suspend_failed"
	ReasonRestored      = "restored"
	ReasonWake          = "wake"
)

type idleMetrics struct {
	suspended       prometheus.Counter
	suspendFailures prometheus.Counter
	idleCheckErrors prometheus.Counter
	restores        prometheus.Counter
	restoreFailures prometheus.Counter
	restoreSeconds  prometheus.Histogram
}

func newIdleMetrics() *idleMetrics {
	return &idleMetrics{
		suspended:       sbx.Counter("sandboxes_suspended_total", "Sandboxes suspended for idleness."),
		suspendFailures: sbx.Counter("suspend_failures_total", "Suspends that failed and returned the sandbox to ready."),
		idleCheckErrors: sbx.Counter("idle_check_errors_total", "Idle checks that suspended nothing because activity could not be read."),
		restores:        sbx.Counter("sandboxes_restored_total", "Suspended sandboxes woken."),
		restoreFailures: sbx.Counter("restore_failures_total", "Wakes that ended with the sandbox failed: restore budget spent or snapshot gone."),
		restoreSeconds: sbx.Histogram("restore_seconds", "Time the provider took to restore a suspended sandbox.",
			[]float64{0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60}),
	}
}

func (m *idleMetrics) register(reg prometheus.Registerer) {
	reg.MustRegister(m.suspended, m.suspendFailures, m.idleCheckErrors, m.restores, m.restoreFailures, m.restoreSeconds)
}

// IdleCheckArgs is the periodic idle sweep.
type IdleCheckArgs struct{}

// Kind implements river.JobArgs.
func (IdleCheckArgs) Kind() string { return "sandbox.idle_check" }

// SuspendArgs asks for a suspending sandbox to be snapshotted and released.
type SuspendArgs struct {
	SandboxID string `json:"sandbox_id"`
	// Reason closes the compute line (idle_offload when empty, as for
	// jobs enqueued before it existed; user_suspend for a stop).
	Reason string `json:"reason,omitempty"`
}

// Kind implements river.JobArgs.
func (SuspendArgs) Kind() string { return "sandbox.suspend" }

// InsertOpts: no uniqueness. The ready -> suspending transition enqueues
// exactly one job per suspend, and the worker acts only in suspending.
// River's unique jobs would be wrong here: their default states include
// completed (swallowing every suspend after the first), and a job is
// still "running" for a moment after its work returns, which would
// swallow a quick re-suspend.
func (SuspendArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 5}
}

// suspender is the provider when it can offload sandboxes.
func (m *Manager) suspender() (provider.Suspender, bool) {
	s, ok := m.prov.(provider.Suspender)
	return s, ok
}

// IdleOffload reports whether the idle detector runs.
func (m *Manager) IdleOffload() bool {
	_, ok := m.suspender()
	return ok && m.act != nil && !m.cfg.NoIdleOffload
}

// CheckIdle suspends every ready sandbox idle longer than its timeout with
// no live connection. It runs from the periodic job (once across
// replicas). When activity cannot be read it suspends nothing and returns
// the error: a sandbox is never suspended on missing data. Nor on lost
// data: idleness counts from the latest of the compute line's start, the
// last mark and the start of the activity store's epoch, before which
// nothing is known (Redis restarted empty, flushed or failed over; a
// restarted `sbx dev`).
func (m *Manager) CheckIdle(ctx context.Context) error {
	if !m.IdleOffload() {
		return nil
	}
	cands, err := m.store.IdleCandidates(ctx)
	if err != nil {
		return fmt.Errorf("idle check: %w", err)
	}
	if len(cands) == 0 {
		return nil
	}
	ids := make([]string, len(cands))
	for i, c := range cands {
		ids[i] = c.SandboxID
	}
	seen, err := m.act.Status(ctx, ids)
	if err != nil {
		m.metrics.idleCheckErrors.Inc()
		return fmt.Errorf("idle check: read activity, suspending nothing: %w", err)
	}
	now := m.now()
	var idle []store.IdleCandidate
	for _, c := range cands {
		st := seen[c.SandboxID]
		if st.Live {
			continue
		}
		timeout := c.IdleTimeout
		if timeout <= 0 {
			timeout = m.cfg.IdleTimeout
		}
		if c.OwnIdleTimeout > 0 && c.OwnIdleTimeout < timeout {
			timeout = c.OwnIdleTimeout
		}
		last := c.ComputeSince
		for _, t := range []time.Time{st.LastSeen, st.EpochStart} {
			if t.After(last) {
				last = t
			}
		}
		if now.Sub(last) < timeout {
			continue
		}
		idle = append(idle, c)
	}
	busy := m.stillBusy(ctx, idle)
	var errs []error
	for _, c := range idle {
		if busy[c.SandboxID] {
			continue
		}
		if !m.platformSuspends(ctx, c.SandboxID) {
			continue // e.g. macOS in v1: an idle sandbox stays ready
		}
		if err := m.Suspend(ctx, c.SandboxID, "idle_detector"); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Suspend moves a ready sandbox to suspending and enqueues the snapshot
// job in the same transaction. The ledger does not change: the sandbox
// still holds its pod while the snapshot is taken, so the compute line
// runs on (spec: "session continues") until the suspender closes it. A
// sandbox no longer ready is left alone.
func (m *Manager) Suspend(ctx context.Context, id, actor string) error {
	changed, _, err := m.transition(ctx, id, step{
		from: store.StateReady, to: store.StateSuspending, reason: ReasonIdleOffload, actor: actor,
		job: SuspendArgs{SandboxID: id},
	})
	if err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	if changed {
		m.log.InfoContext(ctx, "sandbox idle; suspending", "sandbox_id", id)
	}
	return nil
}

type suspendWorker struct {
	river.WorkerDefaults[SuspendArgs]
	m *Manager
}

// Work snapshots and releases the sandbox. If the provider fails, the
// sandbox goes back to ready (its server restarted on the workspace that
// is still there) and the failure is reported; it is never left without
// its workspace.
func (w *suspendWorker) Work(ctx context.Context, job *river.Job[SuspendArgs]) error {
	m := w.m
	id := job.Args.SandboxID
	sb, ok, err := m.jobSandbox(ctx, id, store.StateSuspending)
	if !ok {
		return err
	}
	sus, can := m.suspender()
	if !can {
		return m.unsuspend(ctx, sb, errors.New("provider cannot suspend"))
	}
	if m.conns != nil {
		m.conns.Forget(id)
	}
	if err := sus.Suspend(ctx, id); err != nil {
		m.log.ErrorContext(ctx, "suspend failed; returning sandbox to ready", "sandbox_id", id, "err", err)
		m.metrics.suspendFailures.Inc()
		m.metrics.jobFailures.WithLabelValues(jobSuspend).Inc()
		uerr := m.unsuspend(ctx, sb, err)
		if uerr != nil && job.Attempt >= job.MaxAttempts {
			// No attempt is left to bring it back: settle it now
			// rather than leave it suspending until the sweep.
			return m.settleSuspending(ctx, id, "suspend failed on its last attempt: "+uerr.Error())
		}
		return uerr
	}
	return m.markSuspended(ctx, id, job.Args.Reason, "suspender")
}

// markSuspended records a suspend that finished (snapshot stored, pod
// released): in one transaction the compute line closes with reason
// (idle_offload when empty), the storage line opens at the same instant
// and the deadline clock stops (SuspendedAt). A sandbox ended meanwhile
// is left alone: its terminate job removes the snapshot.
func (m *Manager) markSuspended(ctx context.Context, id, reason, actor string) error {
	if reason == "" {
		reason = ReasonIdleOffload
	}
	changed, _, err := m.transition(ctx, id, step{
		from: store.StateSuspending, to: store.StateSuspended, reason: reason, actor: actor,
		apply: func(tx store.Tx, sb *store.Sandbox, now time.Time) error {
			if _, err := tx.CloseSessions(ctx, id, store.SessionCompute, now, reason); err != nil {
				return err
			}
			_, err := tx.OpenSession(ctx, store.Session{
				SandboxID: id, AccountID: sb.AccountID, Platform: sb.Platform, Kind: store.SessionStorage, StartedAt: now,
			})
			sb.SuspendedAt = &now
			return err
		},
	})
	if err != nil {
		return fmt.Errorf("mark %s suspended: %w", id, err)
	}
	if changed {
		m.metrics.suspended.Inc()
		m.log.InfoContext(ctx, "sandbox suspended", "sandbox_id", id, "reason", reason)
	}
	return nil
}

// unsuspend brings a sandbox whose suspend failed back to ready: its
// server is started again on the workspace. The ledger does not change:
// the compute line never closed.
func (m *Manager) unsuspend(ctx context.Context, sb store.Sandbox, cause error) error {
	spec, _, err := m.spec(ctx, sb)
	if err != nil {
		return err
	}
	ep, err := m.prov.Provision(ctx, spec)
	if err != nil {
		return fmt.Errorf("restart %s after failed suspend (%v): %w", sb.ID, cause, err)
	}
	_, _, err = m.transition(ctx, sb.ID, step{
		from: store.StateSuspending, to: store.StateReady, reason: ReasonSuspendFailed, actor: "suspender",
		message: cause.Error(),
		apply: func(_ store.Tx, cur *store.Sandbox, _ time.Time) error {
			cur.Endpoint, cur.SSHUser, cur.Workspace = ep.Addr, ep.User, ep.Workspace
			cur.ForwardEndpoint = ep.ForwardAddr
			return nil
		},
	})
	if err != nil {
		return fmt.Errorf("return %s to ready: %w", sb.ID, err)
	}
	// The compute line's start is the floor of idleness, and it did not
	// move: without a mark the detector would try again at its next tick
	// and fail the same way. A mark gives the sandbox a full idle timeout.
	if m.act != nil {
		m.act.Mark(sb.ID)
	}
	return nil
}

// resume readies cur for ready at now inside tx: the storage line closes
// with reason, a compute line opens, the endpoint is recorded, and the
// deadline moves by the time spent suspended (the clock was paused),
// within the lifetime cap. The caller writes the row.
func (m *Manager) resume(ctx context.Context, tx store.Tx, cur *store.Sandbox, ep provider.Endpoint, now time.Time, reason string) error {
	if _, err := tx.CloseSessions(ctx, cur.ID, store.SessionStorage, now, reason); err != nil {
		return err
	}
	if _, err := tx.OpenSession(ctx, store.Session{
		SandboxID: cur.ID, AccountID: cur.AccountID, Platform: cur.Platform, Kind: store.SessionCompute, StartedAt: now,
	}); err != nil {
		return err
	}
	if cur.SuspendedAt != nil {
		if paused := now.Sub(*cur.SuspendedAt); paused > 0 {
			cur.DeadlineAt = cur.DeadlineAt.Add(paused)
		}
		if limit := cur.CreatedAt.Add(m.cfg.MaxLifetime); cur.DeadlineAt.After(limit) {
			cur.DeadlineAt = limit
		}
	}
	cur.SuspendedAt = nil
	cur.Endpoint, cur.SSHUser, cur.Workspace = ep.Addr, ep.User, ep.Workspace
	cur.ForwardEndpoint = ep.ForwardAddr
	return nil
}

// publish tells waiters that id changed state. Delivery is best effort:
// a waiter that misses it re-reads state on its safety tick.
func (m *Manager) publish(ctx context.Context, id string) {
	m.notify.Notify(id)
	if m.act == nil {
		return
	}
	if err := m.act.Publish(context.WithoutCancel(ctx), id); err != nil {
		m.publishFails.Failed(ctx, err) // err names the sandbox
		return
	}
	m.publishFails.Succeeded(ctx)
}

// subscribe registers for id's state changes, through the activity store
// when there is one.
func (m *Manager) subscribe(id string) (<-chan struct{}, func()) {
	if m.act == nil {
		return m.notify.Subscribe(id)
	}
	return m.act.Subscribe(id)
}
