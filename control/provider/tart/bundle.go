package tart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/sbxedge/sbx/control/provider"
)

// BundleStore holds suspended VMs off their host, in S3-compatible object
// storage (s3bundles: zstd, parallel multipart), so a suspended sandbox
// holds no host's disk or slot and wakes on any host that shares it. The
// host that has the VM's disk uses it (Bundled), never control.
type BundleStore interface {
	Put(ctx context.Context, key string, r io.Reader) error
	Get(ctx context.Context, key string, w io.Writer) error
	Exists(ctx context.Context, key string) (bool, error)
	// Delete removes key; an absent key is not an error.
	Delete(ctx context.Context, key string) error
}

// Exporter is implemented by drivers that can move a stopped VM's whole
// directory (config, disk, nvram, state.vzvmsave) as one stream:
// `tart export` / `tart import` on a Mac.
type Exporter interface {
	Export(ctx context.Context, name string, w io.Writer) error
	Import(ctx context.Context, name string, r io.Reader) error
}

func bundleKey(id string) string { return "macos-bundles/" + id + ".tvm" }

// ErrNoBundleStore is a host with no object storage asked to move a
// bundle: its suspended VMs stay on its own disk.
var ErrNoBundleStore = errors.New("this host has no object storage for suspended VMs' bundles (start sbx-macd with --s3-endpoint, --s3-bucket, --s3-access-key-file and --s3-secret-key-file)")

// BundleMover is a driver that moves stopped VMs between its host and
// object storage itself, where the bytes are: control sends a key, never
// the bundle. Bundled is the in-process one (sbx dev, sbx-macd); an agent
// Client asks its agent. Every method answers ErrNoBundleStore when the
// host has no object storage.
type BundleMover interface {
	// StoreBundle exports the stopped VM name and stores it under key;
	// the VM stays until the caller deletes it.
	StoreBundle(ctx context.Context, name, key string) error
	// LoadBundle imports key's bundle as the VM name; the bundle stays
	// until the caller deletes it.
	LoadBundle(ctx context.Context, key, name string) error
	BundleExists(ctx context.Context, key string) (bool, error)
	// DeleteBundle removes key; an absent key is not an error.
	DeleteBundle(ctx context.Context, key string) error
}

// ExportDriver is a Driver whose VMs can be exported (CLI).
type ExportDriver interface {
	Driver
	Exporter
}

// Bundled is a driver whose host moves its own bundles to and from
// Store: the CLI on the machine that has the VMs' disks.
type Bundled struct {
	ExportDriver
	Store BundleStore
}

var (
	_ BundleMover = (*Bundled)(nil)
	_ Exporter    = (*Bundled)(nil)
)

// WithBundles returns d moving its suspended VMs to and from s; a nil s
// returns d itself, whose suspended VMs stay on its disk.
func WithBundles(d ExportDriver, s BundleStore) ExportDriver {
	if s == nil {
		return d
	}
	return &Bundled{ExportDriver: d, Store: s}
}

func (b *Bundled) StoreBundle(ctx context.Context, name, key string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := b.Export(ctx, name, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := b.Store.Put(ctx, key, pr)
	pr.CloseWithError(err)
	if exErr := <-errc; exErr != nil {
		return fmt.Errorf("export %s: %w", name, exErr)
	}
	if err != nil {
		return fmt.Errorf("upload bundle %s: %w", key, err)
	}
	return nil
}

func (b *Bundled) LoadBundle(ctx context.Context, key, name string) error {
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := b.Store.Get(ctx, key, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := b.Import(ctx, name, pr)
	pr.CloseWithError(err)
	if getErr := <-errc; getErr != nil {
		return fmt.Errorf("download bundle %s: %w", key, getErr)
	}
	if err != nil {
		return fmt.Errorf("import %s: %w", name, err)
	}
	return nil
}

func (b *Bundled) BundleExists(ctx context.Context, key string) (bool, error) {
	return b.Store.Exists(ctx, key)
}

func (b *Bundled) DeleteBundle(ctx context.Context, key string) error {
	return b.Store.Delete(ctx, key)
}

// offload has h store the suspended VM's bundle and deletes the VM from
// h. A host with no object storage keeps it: the suspend stands (the VM
// is suspended on its disk, as with no storage anywhere) and the log says
// which host lacks storage, once per host.
func (p *Provider) offload(ctx context.Context, h *host, id string) error {
	bm, ok := h.driver.(BundleMover)
	if !ok {
		return nil
	}
	err := bm.StoreBundle(ctx, vmName(id), bundleKey(id))
	if errors.Is(err, ErrNoBundleStore) {
		p.mu.Lock()
		first := !h.warnedNoStore
		h.warnedNoStore = true
		p.mu.Unlock()
		if first {
			p.log.Warn("macOS host has no object storage: suspended VMs stay on its disk", "host", h.name, "sandbox_id", id, "err", err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("store bundle on %s: %w", h.name, err)
	}
	return h.driver.Delete(ctx, vmName(id))
}

// bundleHosts are the hosts whose object storage holds id's bundle
// (every host with storage, when they share a bucket); hosts without
// storage are skipped.
func (p *Provider) bundleHosts(ctx context.Context, id string) ([]*host, error) {
	var out []*host
	var errs []error
	for _, h := range p.hosts {
		bm, ok := h.driver.(BundleMover)
		if !ok {
			continue
		}
		found, err := bm.BundleExists(ctx, bundleKey(id))
		switch {
		case errors.Is(err, ErrNoBundleStore):
		case err != nil:
			errs = append(errs, fmt.Errorf("bundle of %s on %s: %w", id, h.name, err))
		case found:
			out = append(out, h)
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	return nil, errors.Join(errs...)
}

// deleteBundle removes id's bundle through every host with storage.
func (p *Provider) deleteBundle(ctx context.Context, id string) error {
	var errs []error
	for _, h := range p.hosts {
		if bm, ok := h.driver.(BundleMover); ok {
			if err := bm.DeleteBundle(ctx, bundleKey(id)); err != nil && !errors.Is(err, ErrNoBundleStore) {
				errs = append(errs, fmt.Errorf("delete bundle of %s on %s: %w", id, h.name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// fetchBundle has a host that sees id's bundle (and has a free slot,
// reserved for it) load it; found is false when there is no bundle.
func (p *Provider) fetchBundle(ctx context.Context, spec provider.Spec) (*host, bool, error) {
	holders, err := p.bundleHosts(ctx, spec.SandboxID)
	if err != nil || len(holders) == 0 {
		return nil, false, err
	}
	h, err := p.reserveAmong(ctx, spec, holders)
	if err != nil {
		return nil, false, err
	}
	key, name := bundleKey(spec.SandboxID), vmName(spec.SandboxID)
	if err := h.driver.(BundleMover).LoadBundle(ctx, key, name); err != nil {
		p.slots.release(h.name, name)
		return nil, false, fmt.Errorf("load bundle on %s: %w", h.name, err)
	}
	if err := h.driver.(BundleMover).DeleteBundle(ctx, key); err != nil {
		p.log.Warn("delete fetched bundle", "sandbox_id", spec.SandboxID, "host", h.name, "err", err)
	}
	return h, true, nil
}

// DirBundles is a BundleStore in a directory: for one machine (sbx dev
// without object storage) and for tests of the offload path; hosts that
// share nothing use the S3 store (s3bundles).
type DirBundles struct{ Dir string }

func (d DirBundles) path(key string) (string, error) {
	if !filepath.IsLocal(key) {
		return "", fmt.Errorf("bundle key %q", key)
	}
	return filepath.Join(d.Dir, filepath.FromSlash(key)), nil
}

func (d DirBundles) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), p)
}

func (d DirBundles) Get(ctx context.Context, key string, w io.Writer) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

func (d DirBundles) Exists(ctx context.Context, key string) (bool, error) {
	p, err := d.path(key)
	if err != nil {
		return false, err
	}
	_, err = os.Stat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}

func (d DirBundles) Delete(ctx context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
