package podfiles

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/pkg/sftp"
)

// ErrInvalidPath is matched (errors.Is) by every *PathError.
var ErrInvalidPath = errors.New("invalid sandbox path")

// PathError is a client-supplied path refused before touching the sandbox.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string {
	return fmt.Sprintf("invalid sandbox path %q: %s", e.Path, e.Reason)
}

func (e *PathError) Is(target error) bool { return target == ErrInvalidPath }

// ErrIsDir is returned when a file operation meets a directory.
var ErrIsDir = errors.New("is a directory")

// ErrDirNotEmpty is returned by a non-recursive Remove of a non-empty
// directory.
var ErrDirNotEmpty = errors.New("directory not empty")

// maxNameBytes and maxPathBytes are Linux's NAME_MAX and PATH_MAX.
const maxNameBytes, maxPathBytes = 255, 4096

// ResolvePath joins rel onto the absolute workspace, refusing anything that
// would leave it: absolute paths, ".." climbing above the root, NUL bytes.
// "" and "." resolve to the workspace itself.
//
// The check is lexical. A symlink inside the workspace can still point
// elsewhere; that is accepted because the sandbox is the trust boundary:
// SFTP runs as the sandbox user, who can reach the same files with exec.
func ResolvePath(workspace, rel string) (string, error) {
	if !path.IsAbs(workspace) || path.Clean(workspace) != workspace {
		return "", &PathError{Path: workspace, Reason: "workspace must be an absolute clean path"}
	}
	if strings.ContainsRune(rel, 0) {
		return "", &PathError{Path: rel, Reason: "contains NUL byte"}
	}
	if path.IsAbs(rel) {
		return "", &PathError{Path: rel, Reason: "must be relative to the workspace"}
	}
	clean := path.Clean(rel)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", &PathError{Path: rel, Reason: "escapes the workspace"}
	}
	// Linux's limits (NAME_MAX, PATH_MAX), checked here so that a name
	// too long is the caller's error, not an SFTP failure read as ours.
	for name := range strings.SplitSeq(clean, "/") {
		if len(name) > maxNameBytes {
			return "", &PathError{Path: rel[:min(len(rel), 64)] + "...", Reason: fmt.Sprintf("has a name longer than %d bytes", maxNameBytes)}
		}
	}
	full := path.Join(workspace, clean)
	if len(full) >= maxPathBytes {
		return "", &PathError{Path: rel[:min(len(rel), 64)] + "...", Reason: fmt.Sprintf("is longer than %d bytes with the workspace's", maxPathBytes)}
	}
	return full, nil
}

// FileInfo is one directory entry as the files API reports it. Mode is the
// POSIX permission bits (0755 is 493, with setuid 04000, setgid 02000 and
// sticky 01000), not Go's fs.FileMode, whose type bits sit in the high
// word and mean nothing to a client in another language; Type says what
// kind of entry it is.
type FileInfo struct {
	Name    string    `json:"name"`
	Size    int64     `json:"size"`
	Mode    uint32    `json:"mode"`
	Type    string    `json:"type"`
	IsDir   bool      `json:"is_dir"`
	ModTime time.Time `json:"mod_time"`
}

func toFileInfo(fi fs.FileInfo) FileInfo {
	return FileInfo{Name: fi.Name(), Size: fi.Size(), Mode: posixMode(fi.Mode()), Type: fileType(fi.Mode()),
		IsDir: fi.IsDir(), ModTime: fi.ModTime()}
}

// posixMode is m's permission and special bits as stat(2) numbers them.
func posixMode(m fs.FileMode) uint32 {
	p := uint32(m.Perm())
	for _, b := range []struct {
		bit   fs.FileMode
		posix uint32
	}{{fs.ModeSetuid, 0o4000}, {fs.ModeSetgid, 0o2000}, {fs.ModeSticky, 0o1000}} {
		if m&b.bit != 0 {
			p |= b.posix
		}
	}
	return p
}

// fileType is the entry kind the files API names: file, dir, symlink or
// other (sockets, pipes, devices).
func fileType(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "file"
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	default:
		return "other"
	}
}

// List returns the entries of dir sorted by name. Symlinks are reported as
// themselves (mode has fs.ModeSymlink), not followed.
func List(ctx context.Context, c *sftp.Client, dir string) ([]FileInfo, error) {
	fis, err := c.ReadDirContext(ctx, dir)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	out := make([]FileInfo, 0, len(fis))
	for _, fi := range fis {
		out = append(out, toFileInfo(fi))
	}
	slices.SortFunc(out, func(a, b FileInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Stat describes p, following symlinks.
func Stat(c *sftp.Client, p string) (FileInfo, error) {
	fi, err := c.Stat(p)
	if err != nil {
		return FileInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	return toFileInfo(fi), nil
}

// Open opens the regular file p for streaming and reports its size. The
// returned *sftp.File implements io.WriterTo with several reads in flight,
// so io.Copy(w, f) is both fast and bounded in memory. The caller closes it.
func Open(c *sftp.Client, p string) (*sftp.File, FileInfo, error) {
	f, err := c.Open(p)
	if err != nil {
		return nil, FileInfo{}, fmt.Errorf("open %s: %w", p, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, FileInfo{}, fmt.Errorf("stat %s: %w", p, err)
	}
	if fi.IsDir() {
		f.Close()
		return nil, FileInfo{}, fmt.Errorf("open %s: %w", p, ErrIsDir)
	}
	return f, toFileInfo(fi), nil
}

// Put streams r into the file p, creating parent directories. It writes a
// temporary file next to p and renames it into place, so readers see the
// old file or the complete new one, and a failed or cancelled upload leaves
// nothing behind. Returns the bytes written.
func Put(ctx context.Context, c *sftp.Client, p string, r io.Reader, mode fs.FileMode) (int64, error) {
	dir, base := path.Split(p)
	if base == "" {
		return 0, fmt.Errorf("put %s: %w", p, ErrIsDir)
	}
	if fi, err := c.Stat(p); err == nil && fi.IsDir() {
		return 0, fmt.Errorf("put %s: %w", p, ErrIsDir)
	}
	if dir != "" {
		if err := c.MkdirAll(dir); err != nil {
			return 0, fmt.Errorf("put %s: create parent: %w", p, err)
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	tmp := path.Join(dir, "."+base+".upload-"+hex.EncodeToString(rnd[:]))
	f, err := c.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL)
	if err != nil {
		return 0, fmt.Errorf("put %s: create temp: %w", p, err)
	}
	done := false
	defer func() {
		if !done {
			f.Close()
			c.Remove(tmp)
		}
	}()
	// ReadFrom keeps several writes in flight; ctxReader stops it when
	// the caller goes away.
	n, err := f.ReadFrom(ctxReader{ctx, r})
	if err != nil {
		if diskFull(c, dir, err) {
			err = fmt.Errorf("%w (%w)", ErrNoSpace, err)
		}
		return n, fmt.Errorf("put %s: write: %w", p, err)
	}
	if mode == 0 {
		mode = 0o644
	}
	if err := f.Chmod(mode.Perm()); err != nil {
		return n, fmt.Errorf("put %s: chmod: %w", p, err)
	}
	if err := f.Close(); err != nil {
		if diskFull(c, dir, err) {
			err = fmt.Errorf("%w (%w)", ErrNoSpace, err)
		}
		return n, fmt.Errorf("put %s: close: %w", p, err)
	}
	if err := rename(c, tmp, p); err != nil {
		return n, fmt.Errorf("put %s: rename into place: %w", p, err)
	}
	done = true
	return n, nil
}

// rename replaces newname atomically where the server supports the
// posix-rename extension (OpenSSH and pkg/sftp both do).
func rename(c *sftp.Client, oldname, newname string) error {
	if _, ok := c.HasExtension("posix-rename@openssh.com"); ok {
		return c.PosixRename(oldname, newname)
	}
	// Plain SFTP rename refuses to overwrite; not atomic, but the only way.
	if err := c.Remove(newname); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return c.Rename(oldname, newname)
}

// Remove deletes p. A file or symlink (never its target) is removed; a
// directory only when empty, unless recursive is set, in which case its
// whole tree goes (symlinks inside are removed, not followed).
func Remove(ctx context.Context, c *sftp.Client, p string, recursive bool) error {
	fi, err := c.Lstat(p)
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if !fi.IsDir() {
		if err := c.Remove(p); err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		return nil
	}
	if !recursive {
		entries, err := c.ReadDirContext(ctx, p)
		if err != nil {
			return fmt.Errorf("remove %s: %w", p, err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("remove %s: %w", p, ErrDirNotEmpty)
		}
	} else if err := removeTree(ctx, c, p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	if err := c.RemoveDirectory(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// removeTree empties the directory dir.
func removeTree(ctx context.Context, c *sftp.Client, dir string) error {
	entries, err := c.ReadDirContext(ctx, dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := path.Join(dir, e.Name())
		if e.IsDir() { // ReadDir reports lstat: symlinks are never IsDir
			if err := removeTree(ctx, c, p); err != nil {
				return err
			}
			if err := c.RemoveDirectory(p); err != nil {
				return err
			}
			continue
		}
		if err := c.Remove(p); err != nil {
			return err
		}
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, context.Cause(c.ctx)
	}
	return c.r.Read(p)
}

// ErrNoSpace is a write the sandbox's disk (or its quota, or the file
// size limit) has no room for.
var ErrNoSpace = errors.New("the sandbox's disk is full")

// diskFull reports whether a failed write ran out of room. SFTP v3 has
// no status for it: pkg/sftp's server passes the error's text ("no space
// left on device"), OpenSSH's says only "Failure", so for a bare failure
// the file system under dir is asked (statvfs@openssh.com) whether any
// block is left.
func diskFull(c *sftp.Client, dir string, err error) bool {
	var se *sftp.StatusError
	if !errors.As(err, &se) {
		return false
	}
	msg := strings.ToLower(se.Error())
	for _, s := range []string{"no space left", "quota exceeded", "file too large"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	if se.FxCode() != sftp.ErrSSHFxFailure {
		return false
	}
	if dir == "" {
		dir = "."
	}
	vfs, verr := c.StatVFS(dir)
	return verr == nil && vfs.Bavail == 0
}
