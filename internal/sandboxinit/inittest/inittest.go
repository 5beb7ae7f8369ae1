// Package inittest builds the sandbox's init (cmd/sbx-init) for tests
// that run it for real, such as a local sandbox in sshd mode, whose sshd
// runs "sbx-init ctl" for the init's subsystem, and writes a Secret
// directory the way kubelet mounts one.
package inittest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Build compiles cmd/sbx-init into a directory removed when t ends and
// returns its absolute path. The go build cache makes every build after
// the first a link.
func Build(t testing.TB) string {
	t.Helper()
	bin, err := BuildTo(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// BuildTo compiles cmd/sbx-init into dir (which must be absolute) and
// returns the binary's path, for callers that share one build across
// tests.
func BuildTo(dir string) (string, error) {
	bin := filepath.Join(dir, "sbx-init")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sbxedge/sbx/cmd/sbx-init")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build sbx-init: %w\n%s", err, out)
	}
	return bin, nil
}

// WriteSecret makes dir hold files the way kubelet updates a mounted
// Secret: generation gen's files in a directory of their own, an atomic
// swap of the ..data symlink to it, and each visible name a symlink
// through ..data (names no longer in files are removed). A reader sees
// the old set or the new, never a mix.
func WriteSecret(dir string, gen int, files map[string][]byte) error {
	ts := filepath.Join(dir, "..gen"+strconv.Itoa(gen))
	if err := os.MkdirAll(ts, 0o755); err != nil {
		return err
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(ts, name), b, 0o440); err != nil {
			return err
		}
		link := filepath.Join(dir, name)
		if _, err := os.Lstat(link); err != nil {
			if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
				return err
			}
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	old, _ := os.Readlink(filepath.Join(dir, "..data"))
	if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, keep := files[e.Name()]; !keep && !strings.HasPrefix(e.Name(), "..") {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	if old != "" && old != filepath.Base(ts) {
		_ = os.RemoveAll(filepath.Join(dir, old))
	}
	return nil
}
