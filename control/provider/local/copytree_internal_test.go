package local

import (
	"context"
	"os"
	"path/filepath"
	"testing"
)

// TestCopyTree copies a tree with a nested file, an executable and a
// symlink, with cp and, where cp cannot be found, file by file; both
// copies keep contents, modes and the link, and leave the source alone.
func TestCopyTree(t *testing.T) {
	for _, tc := range []struct {
		name string
		path string // PATH while copying
	}{
		{"cp", os.Getenv("PATH")},
		{"fallback", t.TempDir()}, // no cp on it
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := filepath.Join(t.TempDir(), "ws")
			if err := os.MkdirAll(filepath.Join(src, "a", "b"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "a", "b", "f.txt"), []byte("deep"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("a/b/f.txt", filepath.Join(src, "link")); err != nil {
				t.Fatal(err)
			}
			t.Setenv("PATH", tc.path)
			dst := filepath.Join(t.TempDir(), "copy")
			if err := copyTree(context.Background(), src, dst); err != nil {
				t.Fatalf("copyTree: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(dst, "a", "b", "f.txt")); err != nil || string(b) != "deep" {
				t.Errorf("nested file: %q, %v", b, err)
			}
			if fi, err := os.Stat(filepath.Join(dst, "run.sh")); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("executable: %v, %v; want mode 0755", fi, err)
			}
			if l, err := os.Readlink(filepath.Join(dst, "link")); err != nil || l != "a/b/f.txt" {
				t.Errorf("symlink: %q, %v", l, err)
			}
			if err := os.WriteFile(filepath.Join(dst, "a", "b", "f.txt"), []byte("changed"), 0o644); err != nil {
				t.Fatal(err)
			}
			if b, _ := os.ReadFile(filepath.Join(src, "a", "b", "f.txt")); string(b) != "deep" {
				t.Errorf("writing the copy changed the source: %q", b)
			}
		})
	}
}
