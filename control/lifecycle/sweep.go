package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// ReasonStuck ends a sandbox that stayed suspending or restoring past
// Config.SettleAfter with nothing left of it to bring back.
const ReasonStuck = "stuck"

// SettleStuck settles every sandbox that has been suspending or restoring
// for longer than Config.SettleAfter: its job is gone (it failed every
// attempt, or it was lost with its process), and nothing else moves it.
// What the provider still holds decides how:
//
//   - its server still runs: back to ready, with an alert (the compute
//     line never closed, so the ledger does not change);
//   - only its snapshot remains (suspending whose snapshot finished): the
//     suspend is completed, compute closing and storage opening;
//   - nothing remains: failed, its open line closed with reason stuck,
//     and the cleanup enqueued.
//
// A sandbox whose status the provider cannot tell is left for the next
// pass. Reap runs it; it may be called directly.
func (m *Manager) SettleStuck(ctx context.Context) error {
	stuck, err := m.store.StuckSandboxes(ctx, m.now().Add(-m.cfg.SettleAfter), store.StateSuspending, store.StateRestoring)
	if err != nil {
		return fmt.Errorf("list stuck sandboxes: %w", err)
	}
	var errs []error
	for _, sb := range stuck {
		why := fmt.Sprintf("%s for longer than %s", sb.State, m.cfg.SettleAfter)
		switch sb.State {
		case store.StateSuspending:
			err = m.settleSuspending(ctx, sb.ID, why)
		case store.StateRestoring:
			err = m.settleRestoring(ctx, sb.ID, why)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// status is what the provider holds for id; a sandbox it does not know is
// PhaseNotFound, not an error.
func (m *Manager) status(ctx context.Context, id string) (provider.Instance, error) {
	in, err := m.prov.Status(ctx, id)
	if errors.Is(err, provider.ErrNotFound) {
		return provider.Instance{SandboxID: id, Phase: provider.PhaseNotFound}, nil
	}
	if err != nil {
		return in, fmt.Errorf("status of %s: %w", id, err)
	}
	return in, nil
}

// settleSuspending settles a suspending sandbox whose suspend will not
// finish on its own (see SettleStuck).
func (m *Manager) settleSuspending(ctx context.Context, id, why string) error {
	in, err := m.status(ctx, id)
	if err != nil {
		return fmt.Errorf("settle suspending %s: %w", id, err)
	}
	switch in.Phase {
	case provider.PhaseRunning:
		changed, _, err := m.transition(ctx, id, step{
			from: store.StateSuspending, to: store.StateReady, reason: ReasonSuspendFailed, actor: "settler",
			message: why + "; its server still runs",
			apply: func(_ store.Tx, cur *store.Sandbox, _ time.Time) error {
				if in.Endpoint.Addr != "" {
					cur.Endpoint, cur.SSHUser, cur.Workspace = in.Endpoint.Addr, in.Endpoint.User, in.Endpoint.Workspace
					cur.ForwardEndpoint = in.Endpoint.ForwardAddr
				}
				return nil
			},
		})
		if err != nil {
			return fmt.Errorf("return %s to ready: %w", id, err)
		}
		if changed {
			m.metrics.suspendFailures.Inc()
			m.log.ErrorContext(ctx, "ALERT: suspend never finished; sandbox returned to ready", "sandbox_id", id, "why", why)
			if m.act != nil {
				m.act.Mark(id) // a full idle timeout before the next try
			}
		}
		return nil
	case provider.PhaseStopped:
		m.log.WarnContext(ctx, "suspend finished without being recorded; recording it", "sandbox_id", id, "why", why)
		reason, err := m.suspendReason(ctx, id)
		if err != nil {
			return err
		}
		return m.markSuspended(ctx, id, reason, "settler")
	}
	return m.failStuck(ctx, id, store.StateSuspending, why+"; nothing of it remains ("+string(in.Phase)+")")
}

// settleRestoring settles a restoring sandbox past the overall restore
// deadline: ready if a restore did bring its server back, failed
// otherwise (whatever attempts and leases say).
func (m *Manager) settleRestoring(ctx context.Context, id, why string) error {
	in, err := m.status(ctx, id)
	if err != nil {
		return fmt.Errorf("settle restoring %s: %w", id, err)
	}
	if in.Phase == provider.PhaseRunning && in.Endpoint.Addr != "" {
		sb, err := m.store.Sandbox(ctx, id)
		if err != nil {
			return err
		}
		m.startServices(ctx, sb, in.Endpoint, sb.HostKey, nil)
		changed, _, err := m.transition(ctx, id, step{
			from: store.StateRestoring, to: store.StateReady, reason: ReasonWake, actor: "settler",
			message: why + "; its server runs",
			apply: func(tx store.Tx, cur *store.Sandbox, now time.Time) error {
				clearLease(cur)
				cur.RestoreSnapshot = ""
				return m.resume(ctx, tx, cur, in.Endpoint, now, ReasonRestored)
			},
		})
		if err != nil {
			return fmt.Errorf("mark %s ready: %w", id, err)
		}
		if changed {
			m.log.ErrorContext(ctx, "ALERT: restore never recorded; sandbox found running and marked ready", "sandbox_id", id, "why", why)
		}
		return nil
	}
	return m.failStuck(ctx, id, store.StateRestoring, why)
}

// failStuck moves id, if still in from, to failed: the line open in from
// (compute while suspending, storage while restoring) closes with
// ReasonStuck in the same transaction, and the cleanup is enqueued.
func (m *Manager) failStuck(ctx context.Context, id string, from store.State, why string) error {
	moved := false
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if sb.State != from {
			return nil
		}
		now := m.now().UTC()
		kind := store.SessionCompute
		if from == store.StateRestoring {
			kind = store.SessionStorage
		}
		if _, err := tx.CloseSessions(ctx, id, kind, now, ReasonStuck); err != nil {
			return err
		}
		clearLease(&sb)
		moved = true
		return failLocked(ctx, tx, sb, now, ReasonStuck, "settler", why)
	})
	if errors.Is(err, store.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fail stuck %s: %w", id, err)
	}
	if moved {
		m.metrics.failed.Inc()
		m.log.ErrorContext(ctx, "ALERT: sandbox stuck and gone; failed", "sandbox_id", id, "state", from, "why", why)
		m.publish(ctx, id)
	}
	return nil
}

// suspendReason is the reason the sandbox's latest move to suspending
// gave (idle_offload or user_suspend), which its compute line closes with.
func (m *Manager) suspendReason(ctx context.Context, id string) (string, error) {
	evs, err := m.store.Events(ctx, id, 0)
	if err != nil {
		return "", fmt.Errorf("events of %s: %w", id, err)
	}
	for i := len(evs) - 1; i >= 0; i-- {
		if e := evs[i]; e.Type == "state" && e.State == store.StateSuspending {
			return e.Reason, nil
		}
	}
	return ReasonIdleOffload, nil
}
