package lifecycle

import (
	"context"
	"time"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
)

// Serves reports whether the provider runs sandboxes of platform (a
// provider.PlatformServer says; others run every platform they are
// given): the profiles of other platforms are neither offered nor
// accepted.
func (m *Manager) Serves(platform string) bool {
	ps, ok := m.prov.(provider.PlatformServer)
	return !ok || ps.Serves(platform)
}

// admitProfile refuses, at create, a profile the provider will never run: its
// platform has no hosts here, or no host is large enough for its shape
// (a provider.Fitter says). Either would only wait out the provisioning
// timeout in pending.
func (m *Manager) admitProfile(p store.Profile) error {
	if !m.Serves(p.Platform) {
		return invalid("profile", "profile %s is a %s profile, and this control has no %s hosts", p.Name, p.Platform, p.Platform)
	}
	if f, ok := m.prov.(provider.Fitter); ok {
		if err := f.Fits(provider.Shape{Platform: p.Platform, CPU: p.CPU, MemoryMB: p.MemoryMB}); err != nil {
			return invalid("profile", "profile %s can never run here: %v", p.Name, err)
		}
	}
	return nil
}

// WatchProgress records what a waiting provision reports (a macOS
// create waiting for a licence slot) as an event of the sandbox, and
// says whether the provider reports any.
func (m *Manager) WatchProgress() bool {
	w, ok := m.prov.(provider.ProgressReporter)
	if !ok {
		return false
	}
	w.OnProgress(func(pr provider.Progress) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		sb, err := m.store.Sandbox(ctx, pr.SandboxID)
		if err != nil {
			m.log.WarnContext(ctx, "progress of an unknown sandbox", "sandbox_id", pr.SandboxID, "err", err)
			return
		}
		// A report, not a state change: a store that does not take it
		// is logged, as repoEvent does.
		err = m.store.InTx(ctx, func(tx store.Tx) error {
			return tx.InsertEvent(ctx, store.Event{
				SandboxID: sb.ID, AccountID: sb.AccountID, Type: "provision", Reason: pr.Reason,
				Actor: "provisioner", Message: pr.Message, At: m.now().UTC(),
			})
		})
		if err != nil {
			m.log.WarnContext(ctx, "record provision progress", "sandbox_id", sb.ID, "err", err)
		}
	})
	return true
}
