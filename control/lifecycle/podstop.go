package lifecycle

import (
	"context"
	"errors"
	"time"

	"github.com/sbxedge/sbx/control/provider"
)

// WatchStops subscribes the manager to the provider's pod stops when the
// provider reports them (provider.StopWatcher) and says whether it does.
// Call it before starting the provider's watcher.
func (m *Manager) WatchStops() bool {
	w, ok := m.prov.(provider.StopWatcher)
	if !ok {
		return false
	}
	w.OnStop(func(s provider.Stop) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := m.PodStopped(ctx, s); err != nil {
			m.log.ErrorContext(ctx, "close session for stopped pod", "sandbox_id", s.SandboxID, "reason", s.Reason, "err", err)
		}
	})
	return true
}

// PodStopped ends a ready sandbox whose pod ended on its own, closing its
// compute session at the pod's finish time with the pod's reason. Every
// control replica's watcher reports the same stop; the state check under
// the row lock makes all but the first a no-op. Sandboxes in other states
// are left alone: a pending or restoring one is retried by its job, and a
// suspending or terminating one lost its pod on purpose.
func (m *Manager) PodStopped(ctx context.Context, s provider.Stop) error {
	_, err := m.endAt(ctx, s.SandboxID, s.Reason, "pod-watcher", s.At,
		stillReady)
	if errors.Is(err, ErrNotFound) {
		return nil // a pod of a sandbox this database never had
	}
	return err
}

// platformSuspends reports whether the provider can suspend the sandbox's
// platform; providers that do not say can suspend every platform.
func (m *Manager) platformSuspends(ctx context.Context, id string) bool {
	ps, ok := m.prov.(provider.PlatformSuspender)
	if !ok {
		return true
	}
	sb, err := m.store.Sandbox(ctx, id)
	if err != nil {
		return true // Suspend itself reports what went wrong
	}
	return ps.CanSuspend(sb.Platform)
}
