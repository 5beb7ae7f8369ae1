package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/outage"
)

// ProvisionArgs asks for a pending sandbox to be brought up.
type ProvisionArgs struct {
	SandboxID string `json:"sandbox_id"`
	// Repo is cloned into the workspace before the sandbox is ready.
	Repo *RepoArgs `json:"repo,omitempty"`
}

// Kind implements river.JobArgs.
func (ProvisionArgs) Kind() string { return "sandbox.provision" }

// InsertOpts makes provisioning unique per sandbox while it is queued or
// running, so a replayed create cannot start two pods.
func (ProvisionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// TerminateArgs asks for a sandbox's resources to be released.
type TerminateArgs struct {
	SandboxID string `json:"sandbox_id"`
}

// Kind implements river.JobArgs.
func (TerminateArgs) Kind() string { return "sandbox.terminate" }

// InsertOpts: teardown retries for a long time; persistent failures alert
// through the job-failure metric rather than being dropped.
func (TerminateArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{MaxAttempts: 25, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// ReapArgs is the periodic sweep for deadlines and stuck provisioning.
type ReapArgs struct{}

// Kind implements river.JobArgs.
func (ReapArgs) Kind() string { return "sandbox.reap" }

// Jobs returns the workers and periodic jobs to pass to store.StartJobs.
func (m *Manager) Jobs() store.JobsConfig {
	w := river.NewWorkers()
	river.AddWorker(w, &provisionWorker{m: m})
	river.AddWorker(w, &terminateWorker{m: m})
	river.AddWorker(w, &reapWorker{m: m})
	river.AddWorker(w, newTickWorker[IdleCheckArgs]("idle check", m.CheckIdle, m.log))
	river.AddWorker(w, &suspendWorker{m: m})
	river.AddWorker(w, newTickWorker[RestoreSweepArgs]("restore sweep", m.SweepRestores, m.log))
	river.AddWorker(w, &snapshotWorker{m: m})
	river.AddWorker(w, &deleteSnapshotWorker{m: m})
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(m.cfg.ReapInterval),
			func() (river.JobArgs, *river.InsertOpts) { return ReapArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}),
	}
	if _, ok := m.suspender(); ok {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(m.restoreSweepInterval()),
			func() (river.JobArgs, *river.InsertOpts) { return RestoreSweepArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}))
	}
	if m.IdleOffload() {
		periodic = append(periodic, river.NewPeriodicJob(river.PeriodicInterval(m.cfg.IdleCheckInterval),
			func() (river.JobArgs, *river.InsertOpts) { return IdleCheckArgs{}, nil },
			&river.PeriodicJobOpts{RunOnStart: true}))
	}
	// One retry and timeout policy for every worker: a job's work is a
	// provider call bounded like provisioning.
	return store.JobsConfig{Workers: w, Periodic: periodic, Queues: []string{m.queue},
		RetryPolicy: retryPolicy{}, JobTimeout: m.cfg.ProvisionTimeout}
}

// retryPolicy retries every lifecycle job after retryBackoff.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	return time.Now().Add(retryBackoff(job.Attempt))
}

// retryBackoff keeps retries short: a pod that is not up within seconds
// is usually up within a minute, the sandbox has a provisioning deadline
// anyway, and a teardown or snapshot that fails for long alerts through
// the job-failure metric rather than by waiting.
func retryBackoff(attempt int) time.Duration {
	d := time.Second << min(max(attempt, 1)-1, 5)
	return min(d, 30*time.Second)
}

type provisionWorker struct {
	river.WorkerDefaults[ProvisionArgs]
	m *Manager
}

// Work provisions; on an error it returns only once the store answers
// again (or its timeout ends), so that River records the retry rather
// than losing the outcome to the same outage (see retryStore).
func (w *provisionWorker) Work(ctx context.Context, job *river.Job[ProvisionArgs]) error {
	err := w.work(ctx, job)
	// The last attempt does not return its error: it fails the sandbox,
	// which fail counts. A last attempt that could not even do that
	// leaves the sandbox pending, and the reaper fails it.
	if retried(err, job.JobRow) {
		w.m.metrics.jobRetries.WithLabelValues(jobProvision).Inc()
	}
	if err != nil && ctx.Err() == nil {
		_ = w.m.retryStore(ctx, "reach the store after a failed provisioning", func() error {
			_, err := w.m.store.Sandbox(ctx, job.Args.SandboxID)
			return err
		})
	}
	return err
}

func (w *provisionWorker) work(ctx context.Context, job *river.Job[ProvisionArgs]) error {
	m := w.m
	var sb store.Sandbox
	err := m.retryStore(ctx, "read sandbox "+job.Args.SandboxID, func() error {
		var err error
		sb, err = m.store.Sandbox(ctx, job.Args.SandboxID)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return river.JobCancel(fmt.Errorf("sandbox %s vanished", job.Args.SandboxID))
	}
	if err != nil {
		return err
	}
	if sb.State != store.StatePending {
		return nil // deleted or already provisioned by an earlier attempt
	}
	if m.now().Sub(sb.CreatedAt) > m.cfg.ProvisionTimeout {
		return m.fail(ctx, sb.ID, "provisioning timed out")
	}
	start := time.Now()
	steps := newProvisionSteps(sb.CreatedAt, job.JobRow, start)
	steps.mark("job_start", start)
	var spec provider.Spec
	var hostPub string
	err = m.retryStore(ctx, "build spec of "+sb.ID, func() error {
		var err error
		spec, hostPub, err = m.spec(ctx, sb)
		return err
	})
	if err != nil {
		return err
	}
	spec.FromSnapshot = sb.FromSnapshot // a fork starts as its snapshot
	if job.Args.Repo == nil {
		// With a repo, services start after its clone (startServices).
		spec.Services = m.bootServices(ctx, sb.ID)
	}
	steps.mark("spec", time.Now())
	ep, err := m.prov.Provision(ctx, spec)
	if err != nil {
		m.log.WarnContext(ctx, "provision attempt failed", "sandbox_id", sb.ID, "attempt", job.Attempt, "err", err)
		if job.Attempt >= job.MaxAttempts {
			return m.fail(ctx, sb.ID, err.Error())
		}
		return fmt.Errorf("provision %s: %w", sb.ID, err)
	}
	steps.mark("provision", time.Now())
	if repo := job.Args.Repo; repo != nil {
		if done, err := m.cloneStep(ctx, sb, ep, hostPub, *repo, job.Attempt >= job.MaxAttempts); done || err != nil {
			return err
		}
		steps.mark("clone", time.Now())
	}
	m.startServices(ctx, sb, ep, hostPub, spec.Services)
	steps.mark("services", time.Now())
	boot := ep.Boot // warm_hit or cold_boot, recorded on the ready event
	if boot == "" {
		boot = "cold_boot"
	}
	becameReady := false
	err = m.retryStore(ctx, "mark "+sb.ID+" ready", func() error {
		becameReady = false
		return m.markReady(ctx, sb.ID, ep, hostPub, boot, steps, &becameReady)
	})
	if err != nil {
		return fmt.Errorf("mark %s ready: %w", sb.ID, err)
	}
	if becameReady {
		m.metrics.provisionSeconds.WithLabelValues(sb.AccountID, sb.Platform, boot).Observe(time.Since(start).Seconds())
		m.log.InfoContext(ctx, "sandbox ready", "sandbox_id", sb.ID, "took", time.Since(start))
	}
	return nil
}

// markReady moves a still-pending sandbox to ready and opens its compute
// session, in one transaction; becameReady says whether it did.
func (m *Manager) markReady(ctx context.Context, id string, ep provider.Endpoint, hostPub, boot string, steps *provisionSteps, becameReady *bool) error {
	return m.store.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if cur.State != store.StatePending {
			return nil // deleted while we provisioned: the terminate job cleans up
		}
		now := m.now().UTC()
		cur.State = store.StateReady
		cur.ReadyAt = &now
		cur.Endpoint, cur.SSHUser, cur.Workspace, cur.HostKey = ep.Addr, ep.User, ep.Workspace, hostPub
		cur.ForwardEndpoint = ep.ForwardAddr
		if err := tx.UpdateSandbox(ctx, cur); err != nil {
			return err
		}
		if _, err := tx.OpenSession(ctx, store.Session{
			SandboxID: cur.ID, AccountID: cur.AccountID, Platform: cur.Platform,
			Kind: store.SessionCompute, StartedAt: now,
		}); err != nil {
			return err
		}
		*becameReady = true
		ev := stateEvent(cur, boot, "provisioner", now)
		ev.Message = steps.message(time.Now())
		return tx.InsertEvent(ctx, ev)
	})
}

// spec builds the provider spec, including the derived host key.
func (m *Manager) spec(ctx context.Context, sb store.Sandbox) (provider.Spec, string, error) {
	prof, err := m.store.Profile(ctx, sb.Profile)
	if err != nil {
		return provider.Spec{}, "", fmt.Errorf("profile %s of %s: %w", sb.Profile, sb.ID, err)
	}
	priv, pub, err := m.hostKeys.Key(sb.ID)
	if err != nil {
		return provider.Spec{}, "", err
	}
	// Every spec carries the grant tokens (the same ones each time).
	files, err := m.grantFiles(ctx, sb.ID)
	if err != nil {
		return provider.Spec{}, "", err
	}
	proxy, err := m.proxyEnv(sb.ID)
	if err != nil {
		return provider.Spec{}, "", err
	}
	secretEnv, secretFiles, err := m.secretDelivery(ctx, sb)
	if err != nil {
		return provider.Spec{}, "", err
	}
	files = append(files, secretFiles...)
	// The create's env first: the proxy's names are reserved anyway.
	env := append(append(envPairs(sb.Env), secretEnv...), proxy...)
	credEnv, err := m.credentialEnv(sb)
	if err != nil {
		return provider.Spec{}, "", err
	}
	env = append(env, credEnv...)
	return provider.Spec{
		SandboxID: sb.ID, AccountID: sb.AccountID, Profile: prof.Name, Platform: prof.Platform,
		CPU: prof.CPU, MemoryMB: prof.MemoryMB, DiskGB: prof.DiskGB, Image: prof.Image,
		HostKeyPEM: priv, UserCAKey: m.caKey, Files: files, Env: env,
		Egress: string(m.SandboxNetwork(sb).Mode()),
	}, pub, nil
}

// fail moves a pending sandbox to failed (no session ever opened) and
// enqueues cleanup of whatever the provider started. The worker and the
// reaper may both get here; only the one that moved it counts it.
func (m *Manager) fail(ctx context.Context, id, why string) error {
	return m.failWith(ctx, id, ReasonProvisionFailed, why)
}

// failWith is fail with the end reason given.
func (m *Manager) failWith(ctx context.Context, id, reason, why string) error {
	moved := false
	err := m.retryStore(ctx, "mark "+id+" failed", func() error {
		moved = false
		return m.failTx(ctx, id, reason, why, &moved)
	})
	if err != nil {
		return fmt.Errorf("mark %s failed: %w", id, err)
	}
	if !moved {
		return nil
	}
	m.metrics.failed.Inc()
	m.metrics.jobFailures.WithLabelValues(jobProvision).Inc()
	m.log.WarnContext(ctx, "sandbox failed", "sandbox_id", id, "reason", reason, "why", why)
	return nil
}

// failTx is failWith's transaction; moved says whether it failed the
// sandbox.
func (m *Manager) failTx(ctx context.Context, id, reason, why string, moved *bool) error {
	return m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if sb.State != store.StatePending {
			return nil
		}
		if err := failLocked(ctx, tx, sb, m.now().UTC(), reason, "provisioner", why); err != nil {
			return err
		}
		*moved = true
		return nil
	})
}

// failLocked moves sb, locked in tx, to failed at now with reason as its
// end reason, records the state event by actor with why as its message and
// enqueues the teardown of whatever was started for it.
func failLocked(ctx context.Context, tx store.Tx, sb store.Sandbox, now time.Time, reason, actor, why string) error {
	sb.State = store.StateFailed
	sb.EndReason = reason
	sb.TerminatedAt = &now
	if err := tx.UpdateSandbox(ctx, sb); err != nil {
		return err
	}
	ev := stateEvent(sb, reason, actor, now)
	ev.Message = why
	if err := tx.InsertEvent(ctx, ev); err != nil {
		return err
	}
	return tx.Enqueue(ctx, TerminateArgs{SandboxID: sb.ID}, nil)
}

type terminateWorker struct {
	river.WorkerDefaults[TerminateArgs]
	m *Manager
}

// Work tears down; a teardown whose last attempt fails is counted as
// given up (River discards the job, the sandbox stays terminating).
func (w *terminateWorker) Work(ctx context.Context, job *river.Job[TerminateArgs]) error {
	err := w.work(ctx, job)
	switch {
	case retried(err, job.JobRow):
		w.m.metrics.jobRetries.WithLabelValues(jobTerminate).Inc()
	case err != nil && job.Attempt >= job.MaxAttempts:
		w.m.metrics.jobFailures.WithLabelValues(jobTerminate).Inc()
		w.m.log.ErrorContext(ctx, "teardown given up after its last attempt", "sandbox_id", job.Args.SandboxID, "attempt", job.Attempt, "err", err)
	}
	return err
}

// retried reports whether River will run the job again after err: an
// error that is neither a cancel nor a snooze, before the last attempt.
func retried(err error, job *rivertype.JobRow) bool {
	var cancel *river.JobCancelError
	var snooze *river.JobSnoozeError
	return err != nil && !errors.As(err, &cancel) && !errors.As(err, &snooze) && job.Attempt < job.MaxAttempts
}

func (w *terminateWorker) work(ctx context.Context, job *river.Job[TerminateArgs]) error {
	m := w.m
	id := job.Args.SandboxID
	m.ending.wait(ctx, id) // the edges tell open sessions why first
	if m.conns != nil {
		m.conns.Forget(id)
	}
	if err := m.prov.Destroy(ctx, id); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	return m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		if sb.State != store.StateTerminating {
			return nil
		}
		now := m.now().UTC()
		sb.State = store.StateTerminated
		sb.TerminatedAt = &now
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		return tx.InsertEvent(ctx, stateEvent(sb, sb.EndReason, "terminator", now))
	})
}

// tickWorker runs a periodic job's sweep. A failure is logged and the job
// cancelled: the next tick tries again, and retrying this job would only
// pile up.
// tickWorker runs a periodic step. Its failures are logged once when they
// start and once when the step succeeds again: while Redis or the
// database is away the step fails at every tick.
type tickWorker[A river.JobArgs] struct {
	river.WorkerDefaults[A]
	run   func(context.Context) error
	fails *outage.Log
}

func newTickWorker[A river.JobArgs](what string, run func(context.Context) error, log *slog.Logger) *tickWorker[A] {
	return &tickWorker[A]{run: run, fails: outage.New(log, what, nil)}
}

func (w *tickWorker[A]) Work(ctx context.Context, _ *river.Job[A]) error {
	if err := w.run(ctx); err != nil {
		w.fails.Failed(ctx, err)
		return river.JobCancel(err)
	}
	w.fails.Succeeded(ctx)
	return nil
}

type reapWorker struct {
	river.WorkerDefaults[ReapArgs]
	m *Manager
}

func (w *reapWorker) Work(ctx context.Context, _ *river.Job[ReapArgs]) error {
	return w.m.Reap(ctx)
}

// Reap ends every sandbox past its deadline, fails every sandbox stuck
// in pending past the provisioning timeout and settles those stuck
// suspending or restoring (SettleStuck). It runs from the periodic job
// (once across replicas) and may be called directly.
func (m *Manager) Reap(ctx context.Context) error {
	now := m.now()
	// The deadline clock is paused while suspended (the wake moves the
	// deadline by the time spent): the store returns a suspended sandbox
	// only once the lifetime cap is reached.
	expired, err := m.store.ExpiredSandboxes(ctx, now, m.cfg.MaxLifetime, 500)
	if err != nil {
		return fmt.Errorf("list expired sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range expired {
		if _, err := m.end(ctx, sb.ID, ReasonDeadline, "reaper"); err != nil {
			errs = append(errs, err)
			continue
		}
		m.metrics.reaped.Inc()
	}
	pending, err := m.store.SandboxesInStates(ctx, store.StatePending)
	if err != nil {
		return errors.Join(append(errs, fmt.Errorf("list pending sandboxes: %w", err))...)
	}
	for _, sb := range pending {
		if now.Sub(sb.CreatedAt) > m.cfg.ProvisionTimeout {
			if err := m.fail(ctx, sb.ID, "provisioning timed out"); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := m.SettleStuck(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := m.SweepRetention(ctx); err != nil {
		errs = append(errs, err)
	}
	if _, err := m.SweepEgressLog(ctx); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
