package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/tick"
)

// A restore is leased to the process doing it. The lease lives on the
// sandbox row (LeaseHolder, LeaseUntil) and the holder renews it while the
// provider works, so a restore cut off by a crash is noticed within one
// lease (Config.RestoreLease) rather than after a fixed delay: the
// periodic sweep, on any replica, takes over every restoring sandbox whose
// lease lapsed. Lease times are wall-clock, like River's schedule, not
// the injected clock: they measure a process's liveness, not billing.

// Reasons a wake ends the sandbox with (spec: restoring -> failed on
// timeout; suspended -> restoring -> failed when the snapshot expired).
const (
	ReasonRestoreFailed   = "restore_failed"
	ReasonSnapshotExpired = "snapshot_expired"
)

// restoreLease is one attempt's claim on a restoring sandbox.
type restoreLease struct {
	id      string
	holder  string // random per attempt
	attempt int    // 1-based, across processes
	// began is when the wake that made this attempt started (zero for
	// the sweep's): the restore's ready event times its steps from it.
	began time.Time
}

func (m *Manager) newLease(id string) restoreLease {
	return restoreLease{id: id, holder: newPrefixedID("lease-")}
}

// grant writes l onto sb (the caller holds its row lock and writes it),
// valid for d from now.
func (l restoreLease) grant(sb *store.Sandbox, d time.Duration) {
	until := time.Now().Add(d).UTC()
	sb.LeaseHolder, sb.LeaseUntil, sb.RestoreAttempts = l.holder, &until, l.attempt
}

// clearLease removes the restore lease from a sandbox leaving restoring.
func clearLease(sb *store.Sandbox) {
	sb.LeaseHolder, sb.LeaseUntil, sb.RestoreAttempts = "", nil, 0
}

// holdLease runs work while renewing l every third of a lease, and
// returns work's error once the renewer has stopped. A lease found lost
// (the sandbox left restoring, or another process took over after a
// lapse) is no longer renewed; work goes on, since restores are
// idempotent and whichever finishes first marks the sandbox ready.
func (m *Manager) holdLease(ctx context.Context, l restoreLease, work func(context.Context) error) error {
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick.Every(rctx, m.cfg.RestoreLease/3, func() bool {
			held, err := m.renewLease(rctx, l)
			if err != nil {
				if rctx.Err() == nil {
					m.log.WarnContext(rctx, "renew restore lease", "sandbox_id", l.id, "err", err)
				}
				return true // the next tick tries again before the lease lapses
			}
			if !held {
				m.log.InfoContext(rctx, "restore lease lost", "sandbox_id", l.id, "attempt", l.attempt)
			}
			return held
		})
	}()
	err := work(rctx)
	cancel()
	<-done
	return err
}

// renewLease extends l by one lease; held is false once it is not ours.
func (m *Manager) renewLease(ctx context.Context, l restoreLease) (held bool, err error) {
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, l.id)
		if err != nil {
			return err
		}
		if sb.State != store.StateRestoring || sb.LeaseHolder != l.holder {
			return nil
		}
		held = true
		l.grant(&sb, m.cfg.RestoreLease)
		return tx.UpdateSandbox(ctx, sb)
	})
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return held, err
}

// RestoreSweepArgs is the periodic backstop for restores whose restorer
// went silent.
type RestoreSweepArgs struct{}

// Kind implements river.JobArgs.
func (RestoreSweepArgs) Kind() string { return "sandbox.restore_sweep" }

// restoreSweepInterval is the sweep's tick: half a lease, at least 1 s
// (River on Postgres does not honour sub-second periodic intervals).
func (m *Manager) restoreSweepInterval() time.Duration {
	return max(m.cfg.RestoreLease/2, time.Second)
}

// SweepRestores takes over every restoring sandbox whose lease lapsed
// (its restorer died, or its last attempt failed and the backoff is
// over) and restores them side by side, returning when all are settled.
// An attempt taken over counts against the budget: a sandbox whose
// restores keep dying with their process fails like one whose restores
// keep failing. It runs from the periodic job and may be called directly.
func (m *Manager) SweepRestores(ctx context.Context) error {
	restoring, err := m.store.SandboxesInStates(ctx, store.StateRestoring)
	if err != nil {
		return fmt.Errorf("list restoring sandboxes: %w", err)
	}
	now := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex // guards errs
		errs []error
	)
	for _, sb := range restoring {
		if sb.LeaseUntil != nil && now.Before(*sb.LeaseUntil) {
			continue
		}
		l, ok, err := m.takeLease(ctx, sb.ID)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			continue
		}
		m.log.InfoContext(ctx, "taking over a restore whose lease lapsed", "sandbox_id", l.id, "attempt", l.attempt)
		wg.Go(func() {
			rctx, cancel := context.WithTimeout(ctx, m.cfg.ProvisionTimeout)
			defer cancel()
			if err := m.restoreLeased(rctx, l); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// takeLease leases the restore of id to this process if it is restoring
// and its lease lapsed, counting the attempt. When the budget is already
// spent it fails the sandbox instead. ok reports a lease to restore under.
func (m *Manager) takeLease(ctx context.Context, id string) (l restoreLease, ok bool, err error) {
	l = m.newLease(id)
	failed := false
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if sb.State != store.StateRestoring || (sb.LeaseUntil != nil && time.Now().Before(*sb.LeaseUntil)) {
			return nil
		}
		if sb.RestoreAttempts >= m.cfg.RestoreAttempts {
			failed = true
			return m.failRestore(ctx, tx, sb, ReasonRestoreFailed, "restore budget spent")
		}
		l.attempt = sb.RestoreAttempts + 1
		l.grant(&sb, m.cfg.RestoreLease)
		ok = true
		return tx.UpdateSandbox(ctx, sb)
	})
	if errors.Is(err, store.ErrNotFound) {
		return l, false, nil
	}
	if err != nil {
		return l, false, fmt.Errorf("take over restore of %s: %w", id, err)
	}
	if failed {
		m.restoreFailedNow(ctx, id, ReasonRestoreFailed, errors.New("restore budget spent"))
	}
	return l, ok, nil
}
