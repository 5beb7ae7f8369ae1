package tart

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sbxedge/sbx/control/provider"
)

// Provision clones the sandbox's VM from its template (building that
// first if needed), waits for a slot, boots it and brings up its sshd; a
// VM already running returns its endpoint.
func (p *Provider) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	return p.provision(ctx, spec, false)
}

// Restore brings back a suspended sandbox: its bundle is fetched if it
// was offloaded, and the VM resumes.
func (p *Provider) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	return p.provision(ctx, spec, true)
}

func (p *Provider) provision(ctx context.Context, spec provider.Spec, restore bool) (provider.Endpoint, error) {
	unlock, err := p.lock(spec.SandboxID)
	if err != nil {
		return provider.Endpoint{}, err
	}
	defer unlock()
	id, name := spec.SandboxID, vmName(spec.SandboxID)
	if ep, ok := p.runningEndpoint(id); ok {
		return ep, nil
	}
	h, vm, found, err := p.find(ctx, id)
	if err != nil && !found {
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
	}
	if !found {
		// Offloaded while suspended: a host that sees the bundle and
		// has room loads it.
		if h, found, err = p.fetchBundle(ctx, spec); err != nil {
			return provider.Endpoint{}, fmt.Errorf("restore %s: %w", id, err)
		}
		if found {
			vm = VM{Name: name, State: "suspended"}
		}
	}
	if restore && !found {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", id, provider.ErrSnapshotGone)
	}
	if !found {
		// Placement: a host with a free slot that the shape fits; the
		// template is built there and the clone made beside it.
		if h, err = p.reserve(ctx, spec, nil); err != nil {
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
		}
		if err := p.create(ctx, h, spec); err != nil {
			p.slots.release(h.name, name)
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
		}
	} else if !vm.Running {
		if _, err := p.reserve(ctx, spec, h); err != nil {
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
		}
	}
	p.mu.Lock()
	p.placed[id] = h
	delete(p.crashed, id)
	p.mu.Unlock()
	if !vm.Running {
		if err := h.driver.Run(ctx, name, p.suspendable()); err != nil {
			p.slots.release(h.name, name)
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
		}
	}
	ep, err := p.boot(ctx, h, spec)
	if err != nil {
		// Not left half up: a retry starts over from a stopped VM.
		p.stopVM(context.WithoutCancel(ctx), h, id)
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", id, err)
	}
	p.mu.Lock()
	p.running[id] = ep
	p.mu.Unlock()
	p.watch(h, id)
	p.log.Info("sandbox VM ready", "sandbox_id", id, "host", h.name, "addr", ep.Addr)
	return ep, nil
}

// reserve waits for a slot on only (or any fitting host when nil).
func (p *Provider) reserve(ctx context.Context, spec provider.Spec, only *host) (*host, error) {
	if only != nil {
		return p.reserveAmong(ctx, spec, []*host{only})
	}
	return p.reserveAmong(ctx, spec, nil)
}

// reserveAmong waits for a slot on a fitting host of among (any when nil).
func (p *Provider) reserveAmong(ctx context.Context, spec provider.Spec, among []*host) (*host, error) {
	pick := func(h *host) bool { return p.fits(h, spec) && (among == nil || slices.Contains(among, h)) }
	return p.slots.reserve(ctx, p.hosts, vmName(spec.SandboxID), pick, func(used, total, hosts int) {
		msg := WaitingMessage(used, total, hosts)
		p.log.Info("sandbox waits for a slot", "sandbox_id", spec.SandboxID, "msg", msg)
		p.report(provider.Progress{SandboxID: spec.SandboxID, Reason: "waiting_for_slot", Message: msg})
	})
}

// create clones the sandbox's VM from its template on h and sizes it.
func (p *Provider) create(ctx context.Context, h *host, spec provider.Spec) error {
	tpl, err := p.tpls.ensure(ctx, h, p.templateOf(spec))
	if err != nil {
		return err
	}
	name := vmName(spec.SandboxID)
	if err := h.driver.Clone(ctx, tpl, name); err != nil {
		return fmt.Errorf("clone template %s: %w", tpl, err)
	}
	if err := h.driver.Set(ctx, name, int(spec.CPU+0.999), spec.MemoryMB); err != nil {
		_ = h.driver.Delete(context.WithoutCancel(ctx), name)
		return fmt.Errorf("size VM %s: %w", name, err)
	}
	return nil
}

func (p *Provider) templateOf(spec provider.Spec) Template {
	t, ok := p.cfg.Templates[spec.Profile]
	if !ok {
		t.BaseImage = p.cfg.DefaultBaseImage
	}
	if spec.Image != "" && spec.Image != "local" {
		t.BaseImage = spec.Image
	}
	return t
}

func (p *Provider) runningEndpoint(id string) (provider.Endpoint, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ep, ok := p.running[id]
	return ep, ok
}

// watch reports id's VM ending on its own, as a pod's terminal phase.
func (p *Provider) watch(h *host, id string) {
	p.wg.Go(func() {
		name := vmName(id)
		exit, err := h.driver.Wait(p.ctx, name)
		if err != nil {
			return // closed
		}
		p.slots.release(h.name, name)
		p.mu.Lock()
		_, wasRunning := p.running[id]
		delete(p.running, id)
		asked := p.stopping[id]
		fns := append([]func(provider.Stop){}, p.onStop...)
		if !asked && wasRunning {
			p.crashed[id] = "guest_crash"
		}
		p.mu.Unlock()
		if asked || !wasRunning {
			return
		}
		p.log.Warn("sandbox VM ended on its own", "sandbox_id", id, "host", h.name, "code", exit.Code, "output", exit.Stderr)
		at := exit.At
		if at.IsZero() {
			at = time.Now().UTC()
		}
		for _, fn := range fns {
			fn(provider.Stop{SandboxID: id, Reason: "guest_crash", At: at})
		}
	})
}

// stopVM stops id's VM and frees its slot, as a stop we asked for.
func (p *Provider) stopVM(ctx context.Context, h *host, id string) error {
	name := vmName(id)
	p.mu.Lock()
	p.stopping[id] = true
	delete(p.running, id)
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.stopping, id)
		p.mu.Unlock()
	}()
	err := h.driver.Stop(ctx, name)
	p.slots.release(h.name, name)
	return err
}

// Destroy stops and deletes the sandbox's VM and any offloaded bundle.
func (p *Provider) Destroy(ctx context.Context, id string) error {
	unlock, err := p.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	h, _, found, err := p.find(ctx, id)
	if err != nil && !found {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	if found {
		if err := p.stopVM(ctx, h, id); err != nil {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
		if err := h.driver.Delete(ctx, vmName(id)); err != nil {
			return fmt.Errorf("destroy %s: %w", id, err)
		}
	}
	if err := p.deleteBundle(ctx, id); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	p.mu.Lock()
	delete(p.placed, id)
	delete(p.crashed, id)
	p.mu.Unlock()
	p.log.Info("sandbox VM destroyed", "sandbox_id", id)
	return nil
}

// Status reports one sandbox's VM.
func (p *Provider) Status(ctx context.Context, id string) (provider.Instance, error) {
	if !idPattern.MatchString(id) {
		return provider.Instance{}, fmt.Errorf("tart provider: invalid sandbox id %q", id)
	}
	in := provider.Instance{SandboxID: id}
	if ep, ok := p.runningEndpoint(id); ok {
		in.Phase, in.Endpoint = provider.PhaseRunning, ep
		return in, nil
	}
	_, vm, found, err := p.find(ctx, id)
	if err != nil && !found {
		return in, err
	}
	if !found {
		holders, err := p.bundleHosts(ctx, id)
		if err != nil {
			return in, err
		}
		if len(holders) > 0 {
			in.Phase = provider.PhaseStopped
			return in, nil
		}
	}
	if !found {
		in.Phase = provider.PhaseNotFound
		return in, provider.ErrNotFound
	}
	p.mu.Lock()
	reason := p.crashed[id]
	p.mu.Unlock()
	switch {
	case reason != "":
		in.Phase, in.Reason = provider.PhaseFailed, reason
	case vm.State == "suspended":
		in.Phase = provider.PhaseStopped
	case vm.Running:
		// Running, but not brought up by this process (a restarted
		// control): Provision finds it and returns its endpoint.
		in.Phase, in.Reason = provider.PhaseStopped, "server_not_running"
	default:
		in.Phase, in.Reason = provider.PhaseStopped, "vm_not_running"
	}
	return in, nil
}

// List reports every sandbox VM on every host: the reconcile pass
// destroys those no sandbox owns.
func (p *Provider) List(ctx context.Context) ([]provider.Instance, error) {
	var out []provider.Instance
	var errs []error
	for _, h := range p.hosts {
		vms, err := h.driver.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list VMs on %s: %w", h.name, err))
			continue
		}
		for _, vm := range vms {
			id, ok := sandboxOf(vm.Name)
			if !ok {
				continue
			}
			in, err := p.Status(ctx, id)
			if errors.Is(err, provider.ErrNotFound) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, in)
		}
	}
	return out, errors.Join(errs...)
}

// sandboxOf is the sandbox id of a sandbox VM's name.
func sandboxOf(vm string) (string, bool) {
	if len(vm) <= len(vmPrefix) || vm[:len(vmPrefix)] != vmPrefix || !idPattern.MatchString(vm[len(vmPrefix):]) {
		return "", false
	}
	return vm[len(vmPrefix):], true
}

// Suspend saves the VM's memory (tart suspend), frees its slot and, with
// a host that has object storage, moves the VM's bundle off the host.
func (p *Provider) Suspend(ctx context.Context, id string) error {
	if !p.suspendable() {
		return provider.ErrSuspendUnsupported
	}
	unlock, err := p.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	h, vm, found, err := p.find(ctx, id)
	if err != nil && !found {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	if !found {
		if holders, err := p.bundleHosts(ctx, id); err == nil && len(holders) > 0 {
			return nil // offloaded already
		}
		return fmt.Errorf("suspend %s: %w", id, provider.ErrNotFound)
	}
	name := vmName(id)
	if vm.Running {
		p.mu.Lock()
		p.stopping[id] = true
		delete(p.running, id)
		p.mu.Unlock()
		err := h.driver.Suspend(ctx, name)
		p.mu.Lock()
		delete(p.stopping, id)
		p.mu.Unlock()
		if err != nil {
			return fmt.Errorf("suspend %s: %w", id, err)
		}
		p.slots.release(h.name, name)
	}
	if err := p.offload(ctx, h, id); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	p.log.Info("sandbox VM suspended", "sandbox_id", id, "host", h.name)
	return nil
}
