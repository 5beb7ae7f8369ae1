// Package platform routes sandboxes to a provider by platform: sbx dev
// with a tart host runs Linux sandboxes on the local provider and macOS
// ones on the tart provider, behind one provider.Provider.
package platform

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sbxedge/sbx/control/provider"
)

var (
	_ provider.Provider          = (*Router)(nil)
	_ provider.Suspender         = (*Router)(nil)
	_ provider.PlatformSuspender = (*Router)(nil)
	_ provider.StopWatcher       = (*Router)(nil)
	_ provider.ProgressReporter  = (*Router)(nil)
	_ provider.Fitter            = (*Router)(nil)
	_ provider.Snapshotter       = (*Router)(nil)
	_ provider.PlatformServer    = (*Router)(nil)
)

// Router sends each sandbox to the provider of its platform. A call that
// names only a sandbox ID asks the providers in turn: the one that knows
// the sandbox answers.
type Router struct {
	// Default runs every platform not in ByPlatform.
	Default    provider.Provider
	ByPlatform map[string]provider.Provider
}

func (r *Router) all() []provider.Provider {
	out := []provider.Provider{r.Default}
	for _, p := range r.ByPlatform {
		out = append(out, p)
	}
	return out
}

func (r *Router) of(platform string) provider.Provider {
	if p, ok := r.ByPlatform[platform]; ok {
		return p
	}
	return r.Default
}

// holder is the provider that knows id, or nil.
func (r *Router) holder(ctx context.Context, id string) (provider.Provider, error) {
	for _, p := range r.all() {
		_, err := p.Status(ctx, id)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, provider.ErrNotFound) {
			return nil, err
		}
	}
	return nil, nil
}

func (r *Router) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	return r.of(spec.Platform).Provision(ctx, spec)
}

func (r *Router) Destroy(ctx context.Context, id string) error {
	var errs []error
	for _, p := range r.all() {
		errs = append(errs, p.Destroy(ctx, id))
	}
	return errors.Join(errs...)
}

func (r *Router) Status(ctx context.Context, id string) (provider.Instance, error) {
	p, err := r.holder(ctx, id)
	if err != nil {
		return provider.Instance{}, err
	}
	if p == nil {
		return provider.Instance{SandboxID: id, Phase: provider.PhaseNotFound}, provider.ErrNotFound
	}
	return p.Status(ctx, id)
}

func (r *Router) List(ctx context.Context) ([]provider.Instance, error) {
	var out []provider.Instance
	for _, p := range r.all() {
		l, err := p.List(ctx)
		if err != nil {
			return nil, err
		}
		out = append(out, l...)
	}
	return out, nil
}

func (r *Router) Suspend(ctx context.Context, id string) error {
	p, err := r.holder(ctx, id)
	if err != nil {
		return err
	}
	s, ok := p.(provider.Suspender)
	if !ok {
		return provider.ErrSuspendUnsupported
	}
	return s.Suspend(ctx, id)
}

func (r *Router) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	s, ok := r.of(spec.Platform).(provider.Suspender)
	if !ok {
		return provider.Endpoint{}, provider.ErrSuspendUnsupported
	}
	return s.Restore(ctx, spec)
}

func (r *Router) CanSuspend(platform string) bool {
	p := r.of(platform)
	if ps, ok := p.(provider.PlatformSuspender); ok {
		return ps.CanSuspend(platform)
	}
	_, ok := p.(provider.Suspender)
	return ok
}

func (r *Router) OnStop(fn func(provider.Stop)) {
	for _, p := range r.all() {
		if w, ok := p.(provider.StopWatcher); ok {
			w.OnStop(fn)
		}
	}
}

func (r *Router) OnProgress(fn func(provider.Progress)) {
	for _, p := range r.all() {
		if w, ok := p.(provider.ProgressReporter); ok {
			w.OnProgress(fn)
		}
	}
}

func (r *Router) Fits(s provider.Shape) error {
	if f, ok := r.of(s.Platform).(provider.Fitter); ok {
		return f.Fits(s)
	}
	return nil
}

// Serves: the platforms with a provider of their own, and what Default
// serves.
func (r *Router) Serves(platform string) bool {
	if _, ok := r.ByPlatform[platform]; ok {
		return true
	}
	if ps, ok := r.Default.(provider.PlatformServer); ok {
		return ps.Serves(platform)
	}
	return true
}

func (r *Router) Snapshot(ctx context.Context, id, snapshotID string) error {
	p, err := r.holder(ctx, id)
	if err != nil {
		return err
	}
	s, ok := p.(provider.Snapshotter)
	if !ok {
		return fmt.Errorf("snapshot %s: not supported for this platform", id)
	}
	return s.Snapshot(ctx, id, snapshotID)
}

func (r *Router) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	var errs []error
	for _, p := range r.all() {
		if s, ok := p.(provider.Snapshotter); ok {
			errs = append(errs, s.DeleteSnapshot(ctx, snapshotID))
		}
	}
	return errors.Join(errs...)
}

// Start starts the providers that have background work.
func (r *Router) Start(ctx context.Context) error {
	for _, p := range r.all() {
		if s, ok := p.(interface{ Start(context.Context) error }); ok {
			if err := s.Start(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close closes every provider.
func (r *Router) Close() error {
	var errs []error
	for _, p := range r.all() {
		if c, ok := p.(io.Closer); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}
