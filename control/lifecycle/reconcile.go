package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/tick"
)

// Reconcile brings records and provider in line, at start and then every
// ReconcileInterval (ReconcileEvery): a ready sandbox whose pod vanished
// has its session closed and ends; a ready sandbox whose server stopped (a
// restarted `sbx dev`) is started again; a pod with no live sandbox behind
// it is destroyed.
//
// It runs while jobs move sandboxes, on every replica at once: the ready
// rows are read before the provider is listed, so a sandbox that turns
// ready during the pass (its pod created after the list) is not taken for
// vanished; a pod missing from the list is confirmed gone with a fresh
// Status; and a sandbox is ended only if it is still ready under its row
// lock. Destroying an orphan twice is harmless.
//
// This is the pass at start: it also pushes the declared services to
// every ready sandbox that is running, because a control that just
// started cannot tell a server that kept its processes (a pod) from one
// its provider brought back empty (a restarted `sbx dev`); the push is
// idempotent. The periodic passes (ReconcileEvery) leave services alone.
func (m *Manager) Reconcile(ctx context.Context) error {
	return m.reconcile(ctx, true)
}

// resyncConcurrency bounds the init calls of Reconcile's service push.
const resyncConcurrency = 8

func (m *Manager) reconcile(ctx context.Context, atStart bool) error {
	ready, err := m.store.SandboxesInStates(ctx, store.StateReady)
	if err != nil {
		return fmt.Errorf("reconcile: list ready sandboxes: %w", err)
	}
	instances, err := m.prov.List(ctx)
	if err != nil {
		return fmt.Errorf("reconcile: list provider sandboxes: %w", err)
	}
	byID := make(map[string]provider.Instance, len(instances))
	for _, in := range instances {
		byID[in.SandboxID] = in
	}

	var errs []error
	var running []store.Sandbox
	for _, sb := range ready {
		in, ok := byID[sb.ID]
		if !ok {
			// Listed before its pod existed? Ask for this one again.
			in, err = m.prov.Status(ctx, sb.ID)
			if err != nil && !errors.Is(err, provider.ErrNotFound) {
				errs = append(errs, fmt.Errorf("reconcile: status of %s: %w", sb.ID, err))
				continue
			}
			if errors.Is(err, provider.ErrNotFound) {
				in.Phase = provider.PhaseNotFound
			}
		}
		switch in.Phase {
		case provider.PhaseRunning:
			running = append(running, sb)
		case provider.PhaseNotFound:
			m.log.WarnContext(ctx, "reconcile: pod vanished", "sandbox_id", sb.ID)
			if _, err := m.endAt(ctx, sb.ID, ReasonPodVanished, "reconciler", time.Time{}, stillReady); err != nil {
				errs = append(errs, err)
			}
		case provider.PhaseFailed:
			reason := cmp.Or(in.Reason, "error")
			m.log.WarnContext(ctx, "reconcile: pod failed", "sandbox_id", sb.ID, "reason", reason)
			if _, err := m.endAt(ctx, sb.ID, reason, "reconciler", time.Time{}, stillReady); err != nil {
				errs = append(errs, err)
			}
		default:
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
	if atStart {
		m.resyncServices(ctx, running)
	}
	return errors.Join(errs...)
}

// resyncServices pushes each sandbox's declared services to its init, a
// few at a time; startServices logs what fails (a sandbox is usable
// without its services).
func (m *Manager) resyncServices(ctx context.Context, sbs []store.Sandbox) {
	var g errgroup.Group
	g.SetLimit(resyncConcurrency)
	for _, sb := range sbs {
		g.Go(func() error {
			m.startServices(ctx, sb, provider.Endpoint{Addr: sb.Endpoint, ForwardAddr: sb.ForwardEndpoint, User: sb.SSHUser, Workspace: sb.Workspace}, sb.HostKey, nil)
			return nil
		})
	}
	_ = g.Wait()
}

func stillReady(s store.Sandbox) bool { return s.State == store.StateReady }

// ReconcileEvery runs Reconcile every ReconcileInterval until ctx ends,
// so a pod lost while no watcher saw it (control was down, a watch event
// was missed) or left behind by a crash is handled within one interval.
// The first pass is one interval after the call: the caller reconciles
// once at start, before serving. A pass is bounded like a job
// (ProvisionTimeout); its errors are per sandbox, logged, and retried on
// the next pass. The caller owns the goroutine and waits for it after
// cancelling ctx.
func (m *Manager) ReconcileEvery(ctx context.Context) {
	tick.Every(ctx, m.cfg.ReconcileInterval, func() bool {
		pctx, cancel := context.WithTimeout(ctx, m.cfg.ProvisionTimeout)
		err := m.reconcile(pctx, false)
		cancel()
		if err != nil && ctx.Err() == nil {
			m.log.ErrorContext(ctx, "periodic reconcile finished with errors", "err", err)
		}
		return true
	})
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
	if m.conns != nil {
		m.conns.Forget(sb.ID) // the old server's connections died with it
	}
	if ep.Addr != sb.Endpoint || ep.ForwardAddr != sb.ForwardEndpoint {
		err = m.store.InTx(ctx, func(tx store.Tx) error {
			cur, err := tx.SandboxForUpdate(ctx, sb.ID)
			if err != nil {
				return err
			}
			cur.Endpoint, cur.SSHUser, cur.Workspace = ep.Addr, ep.User, ep.Workspace
			cur.ForwardEndpoint = ep.ForwardAddr
			return tx.UpdateSandbox(ctx, cur)
		})
		if err != nil {
			return err
		}
	}
	// The server came back with nothing running in it, as after a
	// restore: its declared services start again.
	m.startServices(ctx, sb, ep, sb.HostKey, nil)
	return nil
}
