package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// ReasonUserSuspend closes the compute line of a sandbox its owner
// stopped (POST .../suspend), where idle offload says idle_offload.
const ReasonUserSuspend = "user_suspend"

var (
	// ErrWakeDisabled refuses a traffic wake of a suspended sandbox
	// created or patched with wake_on_traffic false: only a resume
	// brings it back.
	ErrWakeDisabled = errors.New("the sandbox is stopped and does not wake on traffic (wake_on_traffic is false); start it first (sbx start, or POST /api/v1/sandboxes/{id}/resume)")
	// ErrCannotStop refuses a stop of a sandbox whose provider or
	// platform cannot suspend it.
	ErrCannotStop = errors.New("this sandbox's platform cannot be stopped (it cannot be suspended); delete it instead, or leave it running")
)

// Stop suspends a sandbox on its owner's word: ready -> suspending in one
// transaction with the suspend job, whose end closes the compute line
// with user_suspend and opens the storage line (the spec's suspending ->
// suspended row). It is idempotent: a sandbox already suspending or
// suspended is returned as it is. One pending or restoring is a
// StateError (try again shortly); one that ended is a StateError too.
func (m *Manager) Stop(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, error) {
	sb, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	switch sb.State {
	case store.StateSuspending, store.StateSuspended:
		return sb, nil
	case store.StateReady:
	default:
		return store.Sandbox{}, &StateError{State: string(sb.State), Action: "stop"}
	}
	if _, ok := m.suspender(); !ok || !m.platformSuspends(ctx, sb.ID) {
		return store.Sandbox{}, ErrCannotStop
	}
	actor := "account:" + acct.ID
	_, state, err := m.transition(ctx, sb.ID, step{
		from: store.StateReady, to: store.StateSuspending, reason: ReasonUserSuspend, actor: actor,
		job: SuspendArgs{SandboxID: sb.ID, Reason: ReasonUserSuspend},
	})
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("stop %s: %w", sb.ID, err)
	}
	switch state {
	case store.StateSuspending, store.StateSuspended:
	default:
		// It left ready under us (deleted, or a pod lost).
		return store.Sandbox{}, &StateError{State: string(state), Action: "stop"}
	}
	m.log.InfoContext(ctx, "sandbox stopped by its owner; suspending", "sandbox_id", sb.ID)
	return m.Get(ctx, acct, sb.ID)
}

// Resume brings a stopped (suspended) sandbox back and returns once it is
// ready, as a wake does, whatever its wake_on_traffic says: storage
// closes and compute opens when the restore lands (the spec's restoring
// -> ready row). A sandbox still suspending is resumed once its suspend
// finishes; a ready one is returned at once. ctx bounds the wait only:
// a restore under way goes on when it ends.
func (m *Manager) Resume(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, error) {
	sb, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	switch sb.State {
	case store.StateReady:
		return sb, nil
	case store.StatePending, store.StateSuspending, store.StateSuspended, store.StateRestoring:
	default:
		return store.Sandbox{}, &StateError{State: string(sb.State), Action: "start"}
	}
	if err := m.wake(ctx, sb.ID, true); err != nil {
		return store.Sandbox{}, err
	}
	return m.Get(ctx, acct, sb.ID)
}
