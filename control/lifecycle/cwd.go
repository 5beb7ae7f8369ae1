package lifecycle

import (
	"path"
	"strings"
)

// maxCwdLen bounds an exec's cwd.
const maxCwdLen = 4096

// ExecDir is the directory an exec with cwd runs in, in a sandbox whose
// workspace is workspace: the workspace itself for an empty cwd; a
// relative cwd is taken from the workspace; an absolute one must name the
// workspace or a directory under it. Anything reaching outside it (a
// "../" past its root, another absolute path) is a 422 on cwd. The
// sandbox resolves symlinks when it changes into the directory: this
// bounds what the API is asked for, it is not a jail (the command itself
// may cd anywhere).
func ExecDir(workspace, cwd string) (string, error) {
	if cwd == "" {
		return workspace, nil
	}
	if len(cwd) > maxCwdLen || strings.ContainsFunc(cwd, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", invalid("cwd", "must be at most %d bytes without control characters", maxCwdLen)
	}
	if workspace == "" {
		return "", invalid("cwd", "the sandbox has no workspace yet")
	}
	ws := path.Clean(workspace)
	dir := cwd
	if !path.IsAbs(dir) {
		dir = path.Join(ws, dir)
	}
	dir = path.Clean(dir)
	if dir != ws && !strings.HasPrefix(dir, strings.TrimSuffix(ws, "/")+"/") {
		return "", invalid("cwd", "must be inside the workspace %s: a path relative to it, or an absolute path under it", ws)
	}
	return dir, nil
}
