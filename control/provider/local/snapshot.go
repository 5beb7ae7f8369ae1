package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/sbxedge/sbx/control/provider"
)

// Snapshots live beside the sandboxes, not in a sandbox's directory:
// Destroy removes that directory, and a snapshot outlives its sandbox.
func (l *Local) snapDir(snapshotID string) string {
	return filepath.Join(filepath.Dir(l.root), "snapshots", snapshotID)
}

// Snapshot copies the sandbox's workspace as snapshotID while its server
// keeps running: a copy-on-write clone where the filesystem has one (cp
// --reflink=auto), a plain copy otherwise. A suspended sandbox's archive
// is unpacked instead. The copy is made aside and renamed into place, so
// a snapshot directory that exists is complete and a retry finds it done.
func (l *Local) Snapshot(ctx context.Context, sandboxID, snapshotID string) error {
	if err := validID(snapshotID); err != nil {
		return err
	}
	unlock, err := l.lock(sandboxID)
	if err != nil {
		return err
	}
	defer unlock()
	dst := l.snapDir(snapshotID)
	if exists(dst) {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return fmt.Errorf("snapshot %s: %w", sandboxID, err)
	}
	tmp := dst + ".tmp"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("snapshot %s: %w", sandboxID, err)
	}
	defer os.RemoveAll(tmp) // no-op after the rename
	ws := filepath.Join(l.dir(sandboxID), "workspace")
	archived := filepath.Join(l.dir(sandboxID), snapshotName)
	switch {
	case exists(ws):
		err = copyTree(ctx, ws, tmp)
	case exists(archived):
		err = extract(archived, tmp)
	default:
		return fmt.Errorf("snapshot %s: %w", sandboxID, provider.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("snapshot %s: %w", sandboxID, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("snapshot %s: %w", sandboxID, err)
	}
	l.logger.Info("sandbox snapshot taken", "sandbox_id", sandboxID, "snapshot_id", snapshotID)
	return nil
}

// DeleteSnapshot removes a snapshot; an unknown one is already gone.
func (l *Local) DeleteSnapshot(ctx context.Context, snapshotID string) error {
	if err := validID(snapshotID); err != nil {
		return err
	}
	if err := os.RemoveAll(l.snapDir(snapshotID)); err != nil {
		return fmt.Errorf("delete snapshot %s: %w", snapshotID, err)
	}
	return nil
}

// workspaceFromSnapshot makes id's workspace a copy of snapshotID,
// replacing what is there (the archive of a suspend too). The caller holds
// id's lock and has stopped its server. A crash leaves either the old
// workspace or the new one (see restoreWorkspace).
func (l *Local) workspaceFromSnapshot(ctx context.Context, id, snapshotID string) error {
	if err := validID(snapshotID); err != nil {
		return err
	}
	src := l.snapDir(snapshotID)
	if !exists(src) {
		return fmt.Errorf("snapshot %s: %w", snapshotID, provider.ErrSnapshotGone)
	}
	dir := l.dir(id)
	tmp := filepath.Join(dir, "workspace.restoring")
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	if err := copyTree(ctx, src, tmp); err != nil {
		return fmt.Errorf("copy snapshot %s: %w", snapshotID, err)
	}
	ws := filepath.Join(dir, "workspace")
	trash := filepath.Join(dir, "workspace.trash")
	if err := os.RemoveAll(trash); err != nil {
		return err
	}
	if err := os.Rename(ws, trash); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("move workspace aside: %w", err)
	}
	if err := os.Rename(tmp, ws); err != nil {
		return fmt.Errorf("put snapshot %s in place: %w", snapshotID, err)
	}
	if err := os.Remove(filepath.Join(dir, snapshotName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return os.RemoveAll(trash)
}

// copyTree copies the directory src to dst, which must not exist: with
// cp, which clones file extents on filesystems that can (btrfs, XFS) and
// copies elsewhere, or, where cp is missing or refuses, file by file.
func copyTree(ctx context.Context, src, dst string) error {
	if err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", src, dst).Run(); err == nil {
		return nil
	}
	if err := os.RemoveAll(dst); err != nil {
		return err
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.MkdirAll(target, info.Mode().Perm()|0o700)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.Type().IsRegular():
			return copyFile(p, target, info.Mode().Perm())
		}
		return nil // sockets and pipes are not workspace content
	})
}

func copyFile(src, dst string, mode fs.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
