package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestDevTryText: the banner never tells people to put the dev token in
// SBX_TOKEN (which goes to any API named later, where the token file goes
// only to this stack), and exports only what differs from the CLI's
// defaults, so the commands it shows work as printed.
func TestDevTryText(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SBX_DATA_DIR", "")
	for _, tc := range []struct {
		api, dir string
		want     []string
		not      []string
	}{
		{"http://127.0.0.1:8080", filepath.Join(home, ".sbx", "dev"), []string{"sbx create && sbx list"}, []string{"export"}},
		{"http://127.0.0.1:18080", filepath.Join(home, ".sbx", "dev"), []string{"export SBX_API=http://127.0.0.1:18080\n"}, []string{"SBX_DATA_DIR"}},
		{"http://127.0.0.1:8080", "/tmp/my sbx", []string{"export SBX_DATA_DIR='/tmp/my sbx'\n"}, []string{"SBX_API"}},
	} {
		got := devTryText(tc.api, tc.dir)
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("devTryText(%s, %s) = %q, want %q in it", tc.api, tc.dir, got, w)
			}
		}
		for _, n := range append(tc.not, "SBX_TOKEN", "cat ") {
			if strings.Contains(got, n) {
				t.Errorf("devTryText(%s, %s) = %q, want no %q", tc.api, tc.dir, got, n)
			}
		}
	}
}
