package podfiles

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files API's mode is the POSIX number a client in any language
// understands (0755 is 493), not Go's fs.FileMode (a folder was
// 2147484141); the kind of entry is its type.
func TestToFileInfoPOSIXMode(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, mode fs.FileMode, make func(p string) error) string {
		p := filepath.Join(dir, name)
		if err := make(p); err != nil {
			t.Fatal(err)
		}
		if mode != 0 {
			if err := os.Chmod(p, mode); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	file := func(p string) error { return os.WriteFile(p, []byte("x"), 0o600) }
	folder := func(p string) error { return os.Mkdir(p, 0o700) }
	for _, tc := range []struct {
		name     string
		path     string
		mode     uint32
		typ      string
		isDir    bool
		wantJSON string
	}{
		{"folder 0755", mk("d", 0o755, folder), 493, "dir", true, `"mode":493,"type":"dir"`},
		{"file 0640", mk("f", 0o640, file), 0o640, "file", false, `"mode":416,"type":"file"`},
		{"setuid file", mk("suid", 0o755|fs.ModeSetuid, file), 0o4755, "file", false, `"mode":2541,`},
		{"sticky folder", mk("tmp", 0o777|fs.ModeSticky, folder), 0o1777, "dir", true, `"mode":1023,`},
		{"symlink", mk("l", 0, func(p string) error { return os.Symlink("f", p) }), 0o777, "symlink", false, `"type":"symlink"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := os.Lstat(tc.path)
			if err != nil {
				t.Fatal(err)
			}
			got := toFileInfo(st)
			if got.Mode != tc.mode || got.Type != tc.typ || got.IsDir != tc.isDir {
				t.Fatalf("mode %#o type %q is_dir %v; want %#o %q %v", got.Mode, got.Type, got.IsDir, tc.mode, tc.typ, tc.isDir)
			}
			b, err := json.Marshal(got)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(b), tc.wantJSON) {
				t.Fatalf("JSON %s lacks %s", b, tc.wantJSON)
			}
		})
	}
}
