package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/control/store"
)

// step is one guarded state change of idle offload and wake.
type step struct {
	from, to      store.State
	reason, actor string
	message       string // event message, optional
	// apply makes the change's other writes (ledger lines, fields) inside
	// the transaction, before the sandbox row is written; optional.
	apply func(tx store.Tx, sb *store.Sandbox, now time.Time) error
	// job is enqueued in the same transaction with jobOpts; optional.
	job     river.JobArgs
	jobOpts *river.InsertOpts
}

// transition moves id from s.from to s.to in one transaction with its
// event, the writes of s.apply and s.job, then notifies waiters. A sandbox
// not in s.from is left alone: changed is false and state is what it was.
func (m *Manager) transition(ctx context.Context, id string, s step) (changed bool, state store.State, err error) {
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		state = sb.State
		if sb.State != s.from {
			return nil
		}
		now := m.now().UTC()
		if s.apply != nil {
			if err := s.apply(tx, &sb, now); err != nil {
				return err
			}
		}
		sb.State = s.to
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		ev := stateEvent(sb, s.reason, s.actor, now)
		ev.Message = s.message
		if err := tx.InsertEvent(ctx, ev); err != nil {
			return err
		}
		changed, state = true, s.to
		if s.job == nil {
			return nil
		}
		return tx.Enqueue(ctx, s.job, s.jobOpts)
	})
	if err != nil {
		return false, state, err
	}
	if changed {
		m.publish(ctx, id)
	}
	return changed, state, nil
}

// jobSandbox reads the sandbox a job works on. ok is false when it is no
// longer in want (another job or a delete got there first); a vanished
// sandbox cancels the job.
func (m *Manager) jobSandbox(ctx context.Context, id string, want store.State) (sb store.Sandbox, ok bool, err error) {
	sb, err = m.store.Sandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return sb, false, river.JobCancel(fmt.Errorf("sandbox %s vanished", id))
	}
	if err != nil {
		return sb, false, err
	}
	return sb, sb.State == want, nil
}
