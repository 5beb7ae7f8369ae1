package lifecycle

import (
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// Reconcile brings records and provider in line after a start: a ready
// sandbox whose pod vanished has its session closed and ends; a ready
// sandbox whose server stopped (a restarted `sbx dev`) is started again;
// a pod with no live sandbox behind it is destroyed.
func (m *Manager) Reconcile(ctx context.Context) error {
	instances, err := m.prov.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list provider sandboxes: %w", err)
	}
	byID := make(map[string]provider.Instance, len(instances))
	for _, in := range instances {
		byID[in.SandboxID] = in
	}

	var errs []error
	ready, err := m.store.SandboxesInStates(ctx, store.StateReady)
	if err != nil {
		return fmt.Errorf("reconcile: list ready sandboxes: %w", err)
	}
	for _, sb := range ready {
		in, ok := byID[sb.ID]
		switch {
		case !ok || in.Phase == provider.PhaseNotFound:
			m.log.WarnContext(ctx, "reconcile: pod vanished", "sandbox_id", sb.ID)
			if _, err := m.end(ctx, sb.ID, ReasonPodVanished, "reconciler"); err != nil {
				errs = append(errs, err)
			}
		case in.Phase == provider.PhaseFailed:
			reason := in.Reason
			if reason == "" {
				reason = "error"
			}
			if _, err := m.end(ctx, sb.ID, reason, "reconciler"); err != nil {
				errs = append(errs, err)
			}
		case in.Phase != provider.PhaseRunning:
			if err := m.restart(ctx, sb); err != nil {
				errs = append(errs, err)
			}
		}
	}

	for _, in := range instances {
		sb, err := m.store.Sandbox(ctx, in.SandboxID)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			errs = append(errs, err)
			continue
		}
		if errors.Is(err, store.ErrNotFound) || sb.State == store.StateTerminated || sb.State == store.StateFailed {
			m.log.InfoContext(ctx, "reconcile: destroying orphan", "sandbox_id", in.SandboxID)
			if err := m.prov.Destroy(ctx, in.SandboxID); err != nil {
				errs = append(errs, fmt.Errorf("destroy orphan %s: %w", in.SandboxID, err))
			}
		}
	}
	return errors.Join(errs...)
}

// restart brings a ready sandbox's server back (same workspace, same host
// key) and records the endpoint, which may have moved.
func (m *Manager) restart(ctx context.Context, sb store.Sandbox) error {
	spec, _, err := m.spec(ctx, sb)
	if err != nil {
		return err
	}
	ep, err := m.prov.Provision(ctx, spec)
	if err != nil {
		return fmt.Errorf("restart %s: %w", sb.ID, err)
	}
	if ep.Addr == sb.Endpoint {
		return nil
	}
	if m.conns != nil {
		m.conns.Forget(sb.ID)
	}
	return m.store.InTx(ctx, func(tx store.Tx) error {
		cur, err := tx.SandboxForUpdate(ctx, sb.ID)
		if err != nil {
			return err
		}
		cur.Endpoint, cur.SSHUser, cur.Workspace = ep.Addr, ep.User, ep.Workspace
		return tx.UpdateSandbox(ctx, cur)
	})
}
