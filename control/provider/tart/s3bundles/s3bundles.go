// Package s3bundles keeps suspended macOS VMs' bundles in S3-compatible
// object storage: the tart provider's BundleStore on internal/objstore,
// zstd-compressed and moved in parallel multipart parts.
//
// It is a package of its own so that the tart provider, and control
// (which only names keys), do not carry an S3 client; only the binaries
// on the machine that has the VMs' disks import it: cmd/sbx-macd
// (--s3-endpoint) and sbx dev --tart.
package s3bundles

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/internal/objstore"
)

// Store is a tart.BundleStore in one bucket.
type Store struct {
	s *objstore.Store
	// parallel is the parts in flight per transfer (0: objstore's).
	parallel int
}

var _ tart.BundleStore = (*Store)(nil)

// Open returns a Store on cfg's bucket, creating the bucket if it is
// missing, so a wrong endpoint or key fails at start rather than at the
// first suspend.
func Open(ctx context.Context, cfg objstore.Config) (*Store, error) {
	s, err := objstore.New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.EnsureBucket(ctx); err != nil {
		return nil, err
	}
	return &Store{s: s, parallel: cfg.Parallel}, nil
}

// Put uploads r, zstd-compressed: a bundle's memory image is mostly zero
// pages, which compress to almost nothing.
func (b *Store) Put(ctx context.Context, key string, r io.Reader) error {
	_, err := b.s.Put(ctx, key, r, objstore.PutOptions{Compression: objstore.Zstd, Parallel: b.parallel})
	return err
}

// Get writes the bundle's original bytes to w.
func (b *Store) Get(ctx context.Context, key string, w io.Writer) error {
	_, err := b.s.GetParallel(ctx, key, w, b.parallel)
	return err
}

// Exists reports whether key is stored.
func (b *Store) Exists(ctx context.Context, key string) (bool, error) {
	_, err := b.s.Stat(ctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, objstore.ErrNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("bundle %s: %w", key, err)
	}
}

// Delete removes key; an absent key is not an error.
func (b *Store) Delete(ctx context.Context, key string) error {
	return b.s.Delete(ctx, key)
}
