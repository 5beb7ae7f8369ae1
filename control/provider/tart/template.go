package tart

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// templates builds each (host, template) once: concurrent creates of one
// profile wait for the same build.
type templates struct {
	p      *Provider
	mu     sync.Mutex // guards builds
	builds map[string]*sync.Mutex
	count  atomic.Int64
}

func newTemplates(p *Provider) *templates {
	return &templates{p: p, builds: map[string]*sync.Mutex{}}
}

// TemplateName is the VM name of t's template: a content hash of the base
// image and the setup script, so a changed script is a new template.
func TemplateName(t Template) string {
	sum := sha256.Sum256([]byte(t.BaseImage + "\x00" + t.SetupScript))
	return templatePrefix + hex.EncodeToString(sum[:8])
}

// TemplateBuilds is how many templates this provider has built.
func (p *Provider) TemplateBuilds() int64 { return p.tpls.count.Load() }

// ensure returns t's template on h, building it if it is not there. The
// caller holds a slot on h for the sandbox's VM, not running yet; a build
// that must boot the template runs in that slot.
func (ts *templates) ensure(ctx context.Context, h *host, t Template) (string, error) {
	if t.BaseImage == "" {
		return "", fmt.Errorf("no base image: set the profile's template or a default base image")
	}
	name := TemplateName(t)
	ts.mu.Lock()
	m := ts.builds[h.name+"/"+name]
	if m == nil {
		m = &sync.Mutex{}
		ts.builds[h.name+"/"+name] = m
	}
	ts.mu.Unlock()
	m.Lock()
	defer m.Unlock()
	vms, err := h.driver.List(ctx)
	if err != nil {
		return "", fmt.Errorf("list VMs on %s: %w", h.name, err)
	}
	for _, vm := range vms {
		if vm.Name == name {
			return name, nil
		}
	}
	if err := ts.build(ctx, h, t, name); err != nil {
		return "", fmt.Errorf("build template %s of %s: %w", name, t.BaseImage, err)
	}
	ts.count.Add(1)
	return name, nil
}

// build clones the base into name+"-build", runs the setup script once
// through the guest, stops it and renames it to name: a template that
// exists is always complete.
func (ts *templates) build(ctx context.Context, h *host, t Template, name string) error {
	p, d := ts.p, h.driver
	tmp := name + "-build"
	_ = d.Stop(ctx, tmp) // a build an earlier process left
	if err := d.Delete(ctx, tmp); err != nil {
		return err
	}
	p.log.Info("building template", "template", name, "base", t.BaseImage, "host", h.name)
	if err := d.Clone(ctx, t.BaseImage, tmp); err != nil {
		return fmt.Errorf("clone %s: %w", t.BaseImage, err)
	}
	if strings.TrimSpace(t.SetupScript) != "" {
		if err := d.Run(ctx, tmp, false); err != nil {
			return err
		}
		if _, err := p.waitIP(ctx, h, tmp); err != nil {
			_ = d.Stop(context.WithoutCancel(ctx), tmp)
			return err
		}
		res, err := d.Exec(ctx, tmp, []byte(t.SetupScript), "/bin/sh", "-s")
		stopErr := d.Stop(context.WithoutCancel(ctx), tmp)
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("setup script exited %d: %s", res.ExitCode, tail(string(res.Stderr)+string(res.Stdout), 400))
		}
		if stopErr != nil {
			return stopErr
		}
	}
	return d.Rename(ctx, tmp, name)
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// TemplateInfo is one template VM on a host.
type TemplateInfo struct {
	Host string `json:"host"`
	Name string `json:"name"`
	// Hash is the content hash of (base image, setup script) in Name.
	Hash string `json:"hash"`
	// Current: a configured profile builds this template (it is in use:
	// never pruned). Profiles are those profiles.
	Current  bool     `json:"current"`
	Profiles []string `json:"profiles"`
	// BaseImage and ScriptSHA256 are known for current templates; an old
	// one's inputs are gone with the profile's old script.
	BaseImage    string `json:"base_image,omitempty"`
	ScriptSHA256 string `json:"script_sha256,omitempty"`
	SizeGB       int    `json:"size_gb"`
	State        string `json:"state"`
	// Building: a build in progress (or one a crashed process left).
	Building bool `json:"building"`
}

// current are the template names of the configured profiles, with the
// template each names and the profiles that use it.
func (p *Provider) current() map[string]currentTemplate {
	cur := map[string]currentTemplate{}
	add := func(profile string, t Template) {
		c := cur[TemplateName(t)]
		c.t = t
		c.profiles = append(c.profiles, profile)
		cur[TemplateName(t)] = c
	}
	for name, t := range p.cfg.Templates {
		add(name, t)
	}
	if p.cfg.DefaultBaseImage != "" {
		add("(default)", Template{BaseImage: p.cfg.DefaultBaseImage})
	}
	for _, c := range cur {
		slices.Sort(c.profiles)
	}
	return cur
}

type currentTemplate struct {
	t        Template
	profiles []string
}

// Templates lists the template VMs on every host.
func (p *Provider) Templates(ctx context.Context) ([]TemplateInfo, error) {
	cur := p.current()
	var out []TemplateInfo
	for _, h := range p.hosts {
		vms, err := h.driver.List(ctx)
		if err != nil {
			return nil, fmt.Errorf("list VMs on %s: %w", h.name, err)
		}
		for _, vm := range vms {
			if !strings.HasPrefix(vm.Name, templatePrefix) {
				continue
			}
			base, building := strings.CutSuffix(vm.Name, "-build")
			info := TemplateInfo{Host: h.name, Name: vm.Name, Hash: strings.TrimPrefix(base, templatePrefix), SizeGB: vm.Size, State: vm.State, Building: building, Profiles: []string{}}
			if c, ok := cur[vm.Name]; ok {
				sum := sha256.Sum256([]byte(c.t.SetupScript))
				info.Current, info.Profiles, info.BaseImage, info.ScriptSHA256 = true, c.profiles, c.t.BaseImage, hex.EncodeToString(sum[:])
			}
			out = append(out, info)
		}
	}
	return out, nil
}

// PruneTemplates deletes the templates no profile builds any more (a
// changed script made a new one) and builds an earlier process left
// half done; sandboxes cloned from them are unaffected (a clone is its
// own copy). It returns what it deleted.
func (p *Provider) PruneTemplates(ctx context.Context) ([]string, error) {
	return p.prune(ctx, true)
}

// PruneUnused is PruneTemplates for another process than the control
// that builds templates (sbx admin templates prune): it leaves builds
// and running templates alone, since they may be that control's work in
// progress, and deletes only stopped templates no profile builds.
func (p *Provider) PruneUnused(ctx context.Context) ([]string, error) {
	return p.prune(ctx, false)
}

func (p *Provider) prune(ctx context.Context, builds bool) ([]string, error) {
	tpls, err := p.Templates(ctx)
	if err != nil {
		return nil, err
	}
	var deleted []string
	for _, t := range tpls {
		if t.Current || !builds && (t.Building || t.State == "running") {
			continue
		}
		h := p.host(t.Host)
		// Held while a build of that name runs, so a build is not pruned.
		p.tpls.mu.Lock()
		m := p.tpls.builds[h.name+"/"+strings.TrimSuffix(t.Name, "-build")]
		p.tpls.mu.Unlock()
		if m != nil && !m.TryLock() {
			continue
		}
		_ = h.driver.Stop(ctx, t.Name)
		err := h.driver.Delete(ctx, t.Name)
		if m != nil {
			m.Unlock()
		}
		if err != nil {
			return deleted, fmt.Errorf("delete template %s on %s: %w", t.Name, h.name, err)
		}
		deleted = append(deleted, t.Host+"/"+t.Name)
	}
	return deleted, nil
}

func (p *Provider) host(name string) *host {
	for _, h := range p.hosts {
		if h.name == name {
			return h
		}
	}
	return nil
}

// Start prunes what earlier runs left: templates of changed scripts and
// half-done builds. (Sandbox VMs no sandbox owns go in lifecycle's
// reconcile pass, which List feeds.) A host that does not answer is
// logged, not fatal: it is pruned at the next start.
func (p *Provider) Start(ctx context.Context) error {
	pruned, err := p.PruneTemplates(ctx)
	if len(pruned) > 0 {
		p.log.Info("pruned templates no profile builds", "templates", strings.Join(pruned, ", "))
	}
	if err != nil {
		p.log.Warn("prune templates", "err", err)
	}
	return nil
}
