// Package tart is the provider for macOS sandboxes on Apple Silicon hosts
// that run Cirrus Labs' tart without Kubernetes: a team's Mac minis (each
// behind a host agent, cmd/sbx-macd) or one developer's Mac under sbx dev.
//
// A sandbox is a tart VM named vmPrefix+<sandbox id>, an APFS
// copy-on-write `tart clone` of its profile's template; the template is
// the profile's base image with its setup script run once through the
// guest, named by a content hash of the two (see template.go), kept
// stopped and reused. Boot is `tart run --no-graphics`, supervised by the
// host's Driver; the sandbox's host key and user CA go in through `tart
// exec`, which then starts an sshd in the guest on the VM's IP (tart ip),
// and from there readiness, exec, files, SSH and previews take the same
// SSH road as every other sandbox.
//
// Apple's licence allows two macOS VMs per host: the provider never asks
// a host for a third (slots.go). A create that finds no slot waits in
// Provision, up to the provisioning timeout, reporting "waiting for a
// macOS slot (2 of 2 in use on N hosts)" through OnProgress.
package tart

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/sbxedge/sbx/control/provider"
)

var (
	_ provider.Provider          = (*Provider)(nil)
	_ provider.StopWatcher       = (*Provider)(nil)
	_ provider.Suspender         = (*Provider)(nil)
	_ provider.PlatformSuspender = (*Provider)(nil)
	_ provider.ProgressReporter  = (*Provider)(nil)
	_ provider.Fitter            = (*Provider)(nil)
)

// PlatformMacOS is the platform of the sandboxes this provider runs.
const PlatformMacOS = "macos"

// vmPrefix names the VMs of sandboxes; templatePrefix those of templates.
const (
	vmPrefix       = "sbx-"
	templatePrefix = "sbxtpl-"
)

// Host is one Mac.
type Host struct {
	Name   string
	Driver Driver
	// Slots is how many VMs may run at once (default 2, Apple's licence).
	Slots int
	// MaxMemoryMB and MaxCPU bound one VM on this host (0: no bound); a
	// shape larger than every host's is refused at create (Fits).
	MaxMemoryMB int
	MaxCPU      float64
	// NoSuspend, when set, says why this host cannot suspend VMs
	// (HostInfo.NoSuspend); Provider.Preflight fills it in too.
	NoSuspend string
}

// Template is what a profile's VMs start from.
type Template struct {
	// BaseImage is an OCI reference (ghcr.io/cirruslabs/macos-sequoia-xcode:latest)
	// or a local VM name.
	BaseImage string
	// SetupScript runs once through the guest (/bin/sh -s, as the guest
	// user) when the template is built; empty: the base as it is.
	SetupScript string
}

// Config configures the provider.
type Config struct {
	Hosts []Host
	// Templates are per profile; a profile with none uses DefaultBaseImage.
	Templates        map[string]Template
	DefaultBaseImage string
	// GuestSSHPort is where the sandbox's sshd listens in the guest
	// (default 2222: macOS's own sshd may hold 22).
	GuestSSHPort int
	// BootTimeout bounds a boot to a reachable sshd (default 5 minutes).
	BootTimeout time.Duration
	// Suspendable runs VMs with --suspendable so idle sandboxes can be
	// suspended (tart 1.8+ on a macOS 14+ host).
	Suspendable bool
	// A host whose driver is a BundleMover moves its suspended VMs to
	// object storage itself (Bundled, or its agent's --s3-endpoint); the
	// provider only names the key.
	Logger *slog.Logger
}

// host is a Host in use.
type host struct {
	name        string
	driver      Driver
	slots       int
	maxMemoryMB int
	maxCPU      float64
	noSuspend   string // guarded by Provider.mu
	// warnedNoStore: the log said once that this host has no object
	// storage; guarded by Provider.mu.
	warnedNoStore bool
}

// Provider implements provider.Provider on tart hosts.
type Provider struct {
	cfg    Config
	log    *slog.Logger
	hosts  []*host
	slots  *slots
	tpls   *templates
	ctx    context.Context // ends at Close: the watchers' lifetime
	cancel context.CancelFunc
	wg     sync.WaitGroup // the watchers

	mu       sync.Mutex // guards the fields below
	locks    map[string]*sync.Mutex
	placed   map[string]*host             // sandbox id → its host
	running  map[string]provider.Endpoint // sandbox id → endpoint while its VM runs under us
	stopping map[string]bool              // stops we asked for: not reported as crashes
	crashed  map[string]string            // sandbox id → reason its VM ended on its own
	onStop   []func(provider.Stop)
	progress []func(provider.Progress)
}

// New checks cfg and returns the provider; it starts nothing.
func New(cfg Config) (*Provider, error) {
	if len(cfg.Hosts) == 0 {
		return nil, errors.New("tart provider: no hosts")
	}
	if cfg.GuestSSHPort == 0 {
		cfg.GuestSSHPort = 2222
	}
	if cfg.BootTimeout == 0 {
		cfg.BootTimeout = 5 * time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Provider{
		cfg: cfg, log: cfg.Logger.With("provider", "tart"), slots: newSlots(), ctx: ctx, cancel: cancel,
		locks: map[string]*sync.Mutex{}, placed: map[string]*host{}, running: map[string]provider.Endpoint{},
		stopping: map[string]bool{}, crashed: map[string]string{},
	}
	seen := map[string]bool{}
	for _, h := range cfg.Hosts {
		if h.Name == "" || h.Driver == nil {
			return nil, fmt.Errorf("tart provider: host %q needs a name and a driver", h.Name)
		}
		if seen[h.Name] {
			return nil, fmt.Errorf("tart provider: host %q listed twice", h.Name)
		}
		seen[h.Name] = true
		if h.Slots == 0 {
			h.Slots = 2
		}
		p.hosts = append(p.hosts, &host{name: h.Name, driver: h.Driver, slots: h.Slots, maxMemoryMB: h.MaxMemoryMB, maxCPU: h.MaxCPU, noSuspend: h.NoSuspend})
	}
	p.tpls = newTemplates(p)
	return p, nil
}

// Name is what webhook messages say sandboxes run on.
func (p *Provider) Name() string { return "tart" }

// Close stops watching VMs. The VMs keep running (a host agent's stay
// up; sbx dev's end with it, see CLI.Run).
func (p *Provider) Close() error {
	p.cancel()
	p.wg.Wait()
	return nil
}

// OnStop registers fn for VMs that end on their own.
func (p *Provider) OnStop(fn func(provider.Stop)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onStop = append(p.onStop, fn)
}

// OnProgress registers fn for reports of a provision that waits.
func (p *Provider) OnProgress(fn func(provider.Progress)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.progress = append(p.progress, fn)
}

func (p *Provider) report(pr provider.Progress) {
	p.mu.Lock()
	fns := append([]func(provider.Progress){}, p.progress...)
	p.mu.Unlock()
	for _, fn := range fns {
		fn(pr)
	}
}

// CanSuspend: macOS sandboxes suspend only where VMs run suspendable,
// on every host: a sandbox may wake on another host than it slept on,
// and one that cannot suspend is exempt from idle suspend.
func (p *Provider) CanSuspend(platform string) bool {
	return platform == PlatformMacOS && p.suspendable()
}

func (p *Provider) suspendable() bool {
	if !p.cfg.Suspendable {
		return false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, h := range p.hosts {
		if h.noSuspend != "" {
			return false
		}
	}
	return true
}

// Fits refuses a shape no host could ever run: it would wait for a slot
// forever. Control turns the error into a 422 at create.
func (p *Provider) Fits(s provider.Shape) error {
	if s.Platform != "" && s.Platform != PlatformMacOS {
		return fmt.Errorf("the tart provider runs macOS sandboxes, not %s", s.Platform)
	}
	for _, h := range p.hosts {
		if h.slots > 0 && (h.maxMemoryMB == 0 || s.MemoryMB <= h.maxMemoryMB) && (h.maxCPU == 0 || s.CPU <= h.maxCPU) {
			return nil
		}
	}
	return fmt.Errorf("no macOS host can run %g CPUs and %d MB: the largest host takes %s", s.CPU, s.MemoryMB, p.largest())
}

func (p *Provider) largest() string {
	var parts []string
	for _, h := range p.hosts {
		parts = append(parts, fmt.Sprintf("%s: %g CPUs, %d MB, %d slots", h.name, h.maxCPU, h.maxMemoryMB, h.slots))
	}
	return strings.Join(parts, "; ")
}

func (p *Provider) fits(h *host, spec provider.Spec) bool {
	return (h.maxMemoryMB == 0 || spec.MemoryMB <= h.maxMemoryMB) && (h.maxCPU == 0 || spec.CPU <= h.maxCPU)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,100}$`)

func vmName(id string) string { return vmPrefix + id }

// lock checks id and serializes lifecycle operations on that sandbox.
func (p *Provider) lock(id string) (func(), error) {
	if !idPattern.MatchString(id) {
		return nil, fmt.Errorf("tart provider: invalid sandbox id %q", id)
	}
	p.mu.Lock()
	m := p.locks[id]
	if m == nil {
		m = &sync.Mutex{}
		p.locks[id] = m
	}
	p.mu.Unlock()
	m.Lock()
	return m.Unlock, nil
}

// find returns the host holding id's VM and the VM, looking at every host
// when it is not known yet (a restarted control).
func (p *Provider) find(ctx context.Context, id string) (*host, VM, bool, error) {
	name := vmName(id)
	p.mu.Lock()
	h := p.placed[id]
	p.mu.Unlock()
	hosts := p.hosts
	if h != nil {
		hosts = append([]*host{h}, p.hosts...)
	}
	var errs []error
	for _, hh := range hosts {
		vms, err := hh.driver.List(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list VMs on %s: %w", hh.name, err))
			continue
		}
		for _, vm := range vms {
			if vm.Name == name {
				p.mu.Lock()
				p.placed[id] = hh
				p.mu.Unlock()
				return hh, vm, true, nil
			}
		}
	}
	return nil, VM{}, false, errors.Join(errs...)
}
