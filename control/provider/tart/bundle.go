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
// storage (internal/objstore: zstd, parallel multipart), so a suspended
// sandbox holds no host's disk or slot and wakes on any host.
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

var errNoExport = errors.New("the host's driver cannot export VMs")

// offload uploads the suspended VM's bundle and deletes it from the host.
func (p *Provider) offload(ctx context.Context, h *host, id string) error {
	ex, ok := h.driver.(Exporter)
	if !ok {
		return errNoExport
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := ex.Export(ctx, vmName(id), pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := p.cfg.Bundles.Put(ctx, bundleKey(id), pr)
	pr.CloseWithError(err)
	if exErr := <-errc; exErr != nil {
		return fmt.Errorf("export %s: %w", vmName(id), exErr)
	}
	if err != nil {
		return fmt.Errorf("upload bundle: %w", err)
	}
	return h.driver.Delete(ctx, vmName(id))
}

// fetchBundle downloads an offloaded VM onto a host with a free slot
// (reserved for it); found is false when there is no bundle.
func (p *Provider) fetchBundle(ctx context.Context, spec provider.Spec) (*host, bool, error) {
	key := bundleKey(spec.SandboxID)
	ok, err := p.cfg.Bundles.Exists(ctx, key)
	if err != nil || !ok {
		return nil, false, err
	}
	h, err := p.reserve(ctx, spec, nil)
	if err != nil {
		return nil, false, err
	}
	ex, ok := h.driver.(Exporter)
	if !ok {
		p.slots.release(h.name, vmName(spec.SandboxID))
		return nil, false, errNoExport
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := p.cfg.Bundles.Get(ctx, key, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err = ex.Import(ctx, vmName(spec.SandboxID), pr)
	pr.CloseWithError(err)
	if getErr := <-errc; getErr != nil && err == nil {
		err = getErr
	}
	if err != nil {
		p.slots.release(h.name, vmName(spec.SandboxID))
		return nil, false, fmt.Errorf("download bundle: %w", err)
	}
	if err := p.cfg.Bundles.Delete(ctx, key); err != nil {
		p.log.Warn("delete fetched bundle", "sandbox_id", spec.SandboxID, "err", err)
	}
	return h, true, nil
}

// DirBundles is a BundleStore in a directory: for one machine (sbx dev
// without object storage) and for tests of the offload path; hosts that
// share nothing use the S3 store (internal/objstore).
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
