package local

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbxedge/sbx/control/provider"
)

const snapshotName = "snapshot.tar.gz"

// Suspend stops the sandbox's server and every process it started, and
// archives its workspace into snapshot.tar.gz, then removes the workspace.
//
// Crash safety: the archive is written to a temp file, fsynced, read back
// in full and compared with what was written, and only then renamed into
// place. The workspace is renamed aside before it is deleted, so at any
// moment either a complete workspace or a complete snapshot exists, and
// when both exist the workspace is authoritative (see restoreWorkspace).
func (l *Local) Suspend(ctx context.Context, id string) error {
	unlock, err := l.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	dir := l.dir(id)
	if !exists(dir) {
		return fmt.Errorf("suspend %s: %w", id, provider.ErrNotFound)
	}
	if err := l.stopLocked(id); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	ws := filepath.Join(dir, "workspace")
	if !exists(ws) {
		if exists(filepath.Join(dir, snapshotName)) {
			return nil // already suspended
		}
		return fmt.Errorf("suspend %s: no workspace and no snapshot", id)
	}
	if err := archive(ctx, ws, filepath.Join(dir, snapshotName)); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	trash := filepath.Join(dir, "workspace.trash")
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("suspend %s: %w", id, err)
	}
	if err := os.Rename(ws, trash); err != nil {
		return fmt.Errorf("suspend %s: move workspace aside: %w", id, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("suspend %s: remove workspace: %w", id, err)
	}
	l.logger.Info("sandbox suspended", "sandbox_id", id)
	return nil
}

// restoreWorkspace makes sure id has a workspace: unpacked from the
// snapshot if there is one, empty for a new sandbox. The caller holds id's
// lock.
func (l *Local) restoreWorkspace(id string) error {
	dir := l.dir(id)
	ws := filepath.Join(dir, "workspace")
	snap := filepath.Join(dir, snapshotName)
	_ = os.RemoveAll(filepath.Join(dir, "workspace.trash"))
	if exists(ws) {
		// Left by a crash between archiving and removing, or between
		// unpacking and removing the snapshot: the workspace is complete.
		if err := os.Remove(snap); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale snapshot: %w", err)
		}
		return nil
	}
	if !exists(snap) {
		return os.MkdirAll(ws, 0o755)
	}
	tmp := filepath.Join(dir, "workspace.restoring")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := extract(snap, tmp); err != nil {
		return fmt.Errorf("restore workspace: %w", err)
	}
	if err := os.Rename(tmp, ws); err != nil {
		return fmt.Errorf("restore workspace: %w", err)
	}
	if err := os.Remove(snap); err != nil {
		return fmt.Errorf("remove snapshot after restore: %w", err)
	}
	l.logger.Info("sandbox workspace restored", "sandbox_id", id)
	return nil
}

// tally is what archive wrote, to compare with what verify reads back.
type tally struct{ entries, bytes int64 }

func archive(ctx context.Context, src, dst string) error {
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("create snapshot: %w", err)
	}
	defer os.Remove(tmp) // no-op after the rename
	want, err := writeArchive(ctx, f, src)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	got, err := readArchive(tmp, "")
	if err != nil {
		return fmt.Errorf("verify snapshot: %w", err)
	}
	if got != want {
		return fmt.Errorf("verify snapshot: read back %d entries/%d bytes, wrote %d/%d", got.entries, got.bytes, want.entries, want.bytes)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("commit snapshot: %w", err)
	}
	return syncDir(filepath.Dir(dst))
}

func writeArchive(ctx context.Context, w io.Writer, src string) (tally, error) {
	var t tally
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		var link string
		switch {
		case fi.Mode().IsRegular(), fi.IsDir():
		case fi.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil // sockets, fifos, devices: nothing to keep
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		t.entries++
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			n, err := io.Copy(tw, f)
			f.Close()
			if err != nil {
				return err
			}
			t.bytes += n
		}
		return nil
	})
	if err != nil {
		return t, err
	}
	if err := tw.Close(); err != nil {
		return t, err
	}
	return t, zw.Close()
}

// readArchive reads the whole archive at src, unpacking it under dst when
// dst is non-empty. Names are checked even when only verifying.
func readArchive(src, dst string) (tally, error) {
	var t tally
	f, err := os.Open(src)
	if err != nil {
		return t, err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return t, err
	}
	tr := tar.NewReader(zr)
	type dirMode struct {
		path string
		hdr  *tar.Header
	}
	var dirs []dirMode
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return t, err
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !filepath.IsLocal(name) {
			return t, fmt.Errorf("archive entry %q escapes the workspace", hdr.Name)
		}
		t.entries++
		target := filepath.Join(dst, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if dst != "" {
				if err := os.MkdirAll(target, 0o700); err != nil {
					return t, err
				}
				dirs = append(dirs, dirMode{target, hdr})
			}
		case tar.TypeReg:
			n, err := copyEntry(tr, dst, target, hdr)
			t.bytes += n
			if err != nil {
				return t, err
			}
		case tar.TypeSymlink:
			if dst != "" {
				if err := os.Symlink(hdr.Linkname, target); err != nil {
					return t, err
				}
			}
		default:
			return t, fmt.Errorf("archive entry %q: unexpected type %c", hdr.Name, hdr.Typeflag)
		}
	}
	if err := zr.Close(); err != nil {
		return t, err
	}
	// Directory modes last: a read-only directory must still take children.
	for i := len(dirs) - 1; i >= 0; i-- {
		d := dirs[i]
		if err := os.Chmod(d.path, d.hdr.FileInfo().Mode().Perm()); err != nil {
			return t, err
		}
		_ = os.Chtimes(d.path, d.hdr.ModTime, d.hdr.ModTime)
	}
	return t, nil
}

func copyEntry(r io.Reader, dst, target string, hdr *tar.Header) (int64, error) {
	if dst == "" {
		return io.Copy(io.Discard, r)
	}
	if err := os.MkdirAll(filepath.Dir(target), 0o700); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, hdr.FileInfo().Mode().Perm())
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chtimes(target, hdr.ModTime, hdr.ModTime)
	}
	return n, err
}

func extract(src, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	_, err := readArchive(src, dst)
	return err
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
