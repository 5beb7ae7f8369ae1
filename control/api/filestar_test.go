package api_test

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type tarEntry struct {
	name, body, link string
	typ              byte
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: 0o644, Size: int64(len(e.body)), Linkname: e.link}
		if e.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			_, _ = io.WriteString(tw, e.body)
		}
	}
	_ = tw.Close()
	return b.Bytes()
}

// TestFolderTar: PUT of a tar unpacks a folder (files, folders, a symlink
// inside), GET ?format=tar brings it back; an archive with an entry
// escaping the workspace or a symlink pointing out of it is a 422 and
// writes nothing, not even its harmless entries.
func TestFolderTar(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	id := e.createReady(t)
	sb, err := e.svc.Store.Sandbox(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	files := "/api/v1/sandboxes/" + id + "/files/"
	good := makeTar(t,
		tarEntry{name: "src/", typ: tar.TypeDir},
		tarEntry{name: "src/main.go", body: "package main\n"},
		tarEntry{name: "README", body: "hello\n"},
		tarEntry{name: "src/readme", typ: tar.TypeSymlink, link: "../README"},
	)
	code, _, b := e.do("dev", "PUT", files+"app?format=tar", bytes.NewReader(good))
	if code != 201 || !strings.Contains(string(b), `"files":4`) {
		t.Fatalf("PUT tar: %d %s", code, b)
	}
	if got, err := os.ReadFile(filepath.Join(sb.Workspace, "app/src/readme")); err != nil || string(got) != "hello\n" {
		t.Fatalf("unpacked symlink reads %q, %v", got, err)
	}
	code, _, b = e.do("dev", "GET", files+"app?format=tar", nil)
	if code != 200 {
		t.Fatalf("GET tar: %d %s", code, b)
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body) + h.Linkname
	}
	want := map[string]string{"src/": "", "src/main.go": "package main\n", "README": "hello\n", "src/readme": "../README"}
	if gb, _ := json.Marshal(got); string(gb) != func() string { wb, _ := json.Marshal(want); return string(wb) }() {
		t.Errorf("GET tar holds %v, want %v", got, want)
	}
	// By Content-Type too, into the workspace root.
	code, _, b = e.do("dev", "PUT", files, bytes.NewReader(makeTar(t, tarEntry{name: "root.txt", body: "r"})), "Content-Type", "application/x-tar")
	if code != 201 {
		t.Fatalf("PUT tar by content type: %d %s", code, b)
	}

	outside := filepath.Dir(sb.Workspace)
	for name, bad := range map[string][]byte{
		"dotdot":         makeTar(t, tarEntry{name: "ok1.txt", body: "x"}, tarEntry{name: "../../evil.txt", body: "x"}),
		"absolute name":  makeTar(t, tarEntry{name: "ok2.txt", body: "x"}, tarEntry{name: "/tmp/evil.txt", body: "x"}),
		"absolute link":  makeTar(t, tarEntry{name: "ok3.txt", body: "x"}, tarEntry{name: "etc", typ: tar.TypeSymlink, link: "/etc"}, tarEntry{name: "etc/evil", body: "x"}),
		"climbing link":  makeTar(t, tarEntry{name: "ok4.txt", body: "x"}, tarEntry{name: "up", typ: tar.TypeSymlink, link: "../../.."}),
		"hard link":      makeTar(t, tarEntry{name: "ok5.txt", body: "x"}, tarEntry{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}),
		"not an archive": []byte("this is not a tar archive at all, but long enough to be read as a header block?" + strings.Repeat("x", 600)),
	} {
		code, _, b := e.do("dev", "PUT", files+"app/sub?format=tar", bytes.NewReader(bad))
		if code != 422 || !strings.Contains(string(b), "invalid_archive") {
			t.Errorf("%s: %d %s, want 422 invalid_archive", name, code, b)
		}
	}
	if _, err := os.Stat(filepath.Join(sb.Workspace, "app/sub")); !os.IsNotExist(err) {
		t.Errorf("a refused archive wrote into app/sub: %v", err)
	}
	for _, p := range []string{filepath.Join(outside, "evil.txt"), filepath.Join(filepath.Dir(outside), "evil.txt"), "/tmp/evil.txt"} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s exists after the refused archives", p)
		}
	}
	if code, _, b := e.do("dev", "GET", files+"app/README?format=tar", nil); code != 400 {
		t.Errorf("GET tar of a file: %d %s, want 400", code, b)
	}
	if code, _, b := e.do("dev", "GET", files+"app?format=zip", nil); code != 400 {
		t.Errorf("format=zip: %d %s, want 400", code, b)
	}
}
