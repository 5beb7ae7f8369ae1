package podfiles

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"

	"github.com/pkg/sftp"
)

// Folders travel as tar archives: TarDir writes one of a folder, Untar
// unpacks one into a folder. The rules are the single files' (see
// ResolvePath): every entry lands inside the workspace, judged lexically;
// a symlink may be stored but must point inside the workspace (an
// absolute target, or a relative one climbing out, is refused), so no
// later entry can be written through it to outside. Untar checks the
// whole archive before it writes anything.

// ErrBadArchive is an archive Untar refuses; nothing was written.
var ErrBadArchive = errors.New("archive refused")

// ArchiveError names the entry that made Untar refuse an archive.
type ArchiveError struct {
	Entry  string
	Reason string
}

func (e *ArchiveError) Error() string {
	return fmt.Sprintf("archive entry %q %s", e.Entry, e.Reason)
}

// Is makes an ArchiveError match ErrBadArchive.
func (e *ArchiveError) Is(target error) bool { return target == ErrBadArchive }

// TarDir writes dir (an absolute path in the sandbox) to w as a tar
// archive of its files, folders and symlinks (as links, not followed),
// named relative to dir. Other kinds (sockets, devices) are left out.
func TarDir(ctx context.Context, c *sftp.Client, dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	walker := c.Walk(dir)
	for walker.Step() {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := walker.Err(); err != nil {
			return fmt.Errorf("tar %s: %w", dir, err)
		}
		p, fi := walker.Path(), walker.Stat()
		rel := strings.TrimPrefix(strings.TrimPrefix(p, dir), "/")
		if rel == "" {
			continue
		}
		var link string
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := c.ReadLink(p)
			if err != nil {
				return fmt.Errorf("tar %s: %w", p, err)
			}
			link = l
		case fi.IsDir(), fi.Mode().IsRegular():
		default:
			continue
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return fmt.Errorf("tar %s: %w", p, err)
		}
		hdr.Name = rel
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := c.Open(p)
			if err != nil {
				return fmt.Errorf("tar %s: %w", p, err)
			}
			_, err = io.Copy(tw, io.LimitReader(ctxReader{ctx, f}, hdr.Size))
			f.Close()
			if err != nil {
				return fmt.Errorf("tar %s: %w", p, err)
			}
		}
	}
	return tw.Close()
}

// CheckArchive reads a whole archive and refuses it (ArchiveError) if any
// entry would land outside the workspace, is a symlink pointing outside
// it, or is of a kind not unpacked (hard links, devices, FIFOs). dir is
// where it unpacks, relative to the workspace. It returns the entries.
func CheckArchive(workspace, dir string, r io.Reader) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, &ArchiveError{Entry: fmt.Sprintf("#%d", n+1), Reason: "cannot be read: " + err.Error()}
		}
		n++
		if _, err := archiveTarget(workspace, dir, hdr); err != nil {
			return n, err
		}
	}
}

// archiveTarget is where hdr unpacks, after the checks of CheckArchive.
func archiveTarget(workspace, dir string, hdr *tar.Header) (string, error) {
	refuse := func(reason string) (string, error) { return "", &ArchiveError{Entry: hdr.Name, Reason: reason} }
	if path.IsAbs(hdr.Name) {
		return refuse("is an absolute path")
	}
	p, err := ResolvePath(workspace, path.Join(dir, hdr.Name))
	if err != nil || p == workspace && hdr.Typeflag != tar.TypeDir {
		return refuse("escapes the workspace")
	}
	if rel := path.Clean(hdr.Name); rel == ".." || strings.HasPrefix(rel, "../") {
		return refuse("escapes the folder it is unpacked into")
	}
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir:
	case tar.TypeSymlink:
		if path.IsAbs(hdr.Linkname) {
			return refuse("is a symlink to an absolute path")
		}
		t := path.Clean(path.Join(path.Dir(p), hdr.Linkname))
		if t != workspace && !strings.HasPrefix(t, workspace+"/") {
			return refuse("is a symlink pointing outside the workspace")
		}
	default:
		return refuse("is not a file, folder or symlink")
	}
	return p, nil
}

// Untar unpacks an archive CheckArchive accepted into dir (relative to
// the workspace), replacing files of the same names. Symlinks are made by
// symlink (target, then the link's path): not over SFTP, whose servers
// disagree on a relative target (pkg/sftp's makes it absolute against its
// working folder). It returns the entries unpacked.
func Untar(ctx context.Context, c *sftp.Client, workspace, dir string, r io.Reader, symlink func(ctx context.Context, target, p string) error) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, &ArchiveError{Entry: fmt.Sprintf("#%d", n+1), Reason: "cannot be read: " + err.Error()}
		}
		p, err := archiveTarget(workspace, dir, hdr)
		if err != nil {
			return n, err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			err = c.MkdirAll(p)
		case tar.TypeReg:
			_, err = Put(ctx, c, p, tr, fs.FileMode(hdr.Mode).Perm())
		case tar.TypeSymlink:
			if err = c.MkdirAll(path.Dir(p)); err == nil {
				err = symlink(ctx, hdr.Linkname, p)
			}
		}
		if err != nil {
			return n, fmt.Errorf("unpack %s: %w", hdr.Name, err)
		}
		n++
	}
}
