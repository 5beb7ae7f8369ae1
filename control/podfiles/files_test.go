package podfiles_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"path"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/internal/podssh"
)

func testFiles(t *testing.T, ctx context.Context, pool *podssh.Pool, target podssh.Target) {
	c, err := podfiles.Client(ctx, pool, target)
	if err != nil {
		t.Fatal(err)
	}
	// The client is kept on the connection: a second call reuses it.
	if again, err := podfiles.Client(ctx, pool, target); err != nil || again != c {
		t.Fatalf("second Client = %p, %v; want the kept %p", again, err, c)
	}
	ws := target.Workspace
	resolve := func(rel string) string {
		t.Helper()
		p, err := podfiles.ResolvePath(ws, rel)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}

	t.Run("put get list delete", func(t *testing.T) {
		p := resolve("a/b/hello.txt")
		n, err := podfiles.Put(ctx, c, p, strings.NewReader("hello"), 0o640)
		if err != nil || n != 5 {
			t.Fatalf("Put = %d, %v; want 5, nil", n, err)
		}
		// Overwrite replaces atomically.
		if _, err := podfiles.Put(ctx, c, p, strings.NewReader("hello again"), 0); err != nil {
			t.Fatal(err)
		}
		f, fi, err := podfiles.Open(c, p)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(f)
		f.Close()
		if string(got) != "hello again" || fi.Size != 11 {
			t.Errorf("Open = %q size %d, want %q size 11", got, fi.Size, "hello again")
		}
		entries, err := podfiles.List(ctx, c, resolve("a/b"))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name != "hello.txt" || entries[0].IsDir || entries[0].Size != 11 || entries[0].ModTime.IsZero() {
			t.Errorf("List = %+v, want just hello.txt (no temp files)", entries)
		}
		if err := podfiles.Remove(ctx, c, resolve("a"), false); !errors.Is(err, podfiles.ErrDirNotEmpty) {
			t.Errorf("non-recursive Remove of non-empty dir = %v, want ErrDirNotEmpty", err)
		}
		if err := podfiles.Remove(ctx, c, p, false); err != nil {
			t.Fatal(err)
		}
		if err := podfiles.Remove(ctx, c, resolve("a/b"), false); err != nil {
			t.Errorf("Remove empty dir: %v", err)
		}
		if _, err := podfiles.Put(ctx, c, resolve("a/x/y/z"), strings.NewReader("z"), 0); err != nil {
			t.Fatal(err)
		}
		if err := podfiles.Remove(ctx, c, resolve("a"), true); err != nil {
			t.Errorf("recursive Remove: %v", err)
		}
		if _, err := podfiles.Stat(c, resolve("a")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Stat after remove = %v, want ErrNotExist", err)
		}
		if _, _, err := podfiles.Open(c, resolve("missing")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Open missing = %v, want ErrNotExist", err)
		}
		if _, _, err := podfiles.Open(c, ws); !errors.Is(err, podfiles.ErrIsDir) {
			t.Errorf("Open dir = %v, want ErrIsDir", err)
		}
	})

	t.Run("failed upload leaves nothing", func(t *testing.T) {
		p := resolve("fail/partial.bin")
		r := io.MultiReader(bytes.NewReader(make([]byte, 1<<20)), errReader{})
		if _, err := podfiles.Put(ctx, c, p, r, 0); err == nil {
			t.Fatal("Put with failing reader succeeded")
		}
		entries, err := podfiles.List(ctx, c, resolve("fail"))
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 0 {
			t.Errorf("after failed Put dir holds %+v, want nothing", entries)
		}
	})

	t.Run("50 MiB streamed", func(t *testing.T) {
		const size = 50 << 20
		p := resolve("big.bin")
		src := func() io.Reader {
			return io.LimitReader(rand.NewChaCha8([32]byte{1, 2, 3}), size)
		}
		wantSum := sha256.New()
		io.Copy(wantSum, src())

		var peak atomic.Uint64
		stop := sampleHeap(&peak)
		start := time.Now()
		n, err := podfiles.Put(ctx, c, p, src(), 0)
		if err != nil || n != size {
			t.Fatalf("Put = %d, %v", n, err)
		}
		f, fi, err := podfiles.Open(c, p)
		if err != nil {
			t.Fatal(err)
		}
		gotSum := sha256.New()
		m, err := io.Copy(gotSum, f)
		f.Close()
		stop()
		if err != nil || m != size || fi.Size != size {
			t.Fatalf("read back %d (stat %d), %v; want %d", m, fi.Size, err, size)
		}
		if !bytes.Equal(gotSum.Sum(nil), wantSum.Sum(nil)) {
			t.Fatal("50 MiB file differs after round trip")
		}
		t.Logf("round trip %v, peak heap %d MiB", time.Since(start), peak.Load()>>20)
		// Both ends (the embedded server too) live in this process; a
		// whole-file buffer would push the heap past 50 MiB.
		if peak.Load() > 40<<20 {
			t.Errorf("peak heap %d MiB during a 50 MiB transfer, want streaming (< 40 MiB)", peak.Load()>>20)
		}
		podfiles.Remove(ctx, c, p, false)
	})
}

type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("client went away") }

// sampleHeap records the peak live heap until the returned stop is called.
func sampleHeap(peak *atomic.Uint64) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); <-finished }
}

func TestResolvePath(t *testing.T) {
	const ws = "/work/ws"
	for _, tc := range []struct {
		rel, want string
		ok        bool
	}{
		{"", ws, true},
		{".", ws, true},
		{"a/b", ws + "/a/b", true},
		{"a/../b", ws + "/b", true},
		{"./a//b/", ws + "/a/b", true},
		{"..", "", false},
		{"../x", "", false},
		{"a/../../x", "", false},
		{"/etc/passwd", "", false},
		{"/", "", false},
		{"a\x00b", "", false},
		{"..a", ws + "/..a", true},
		{"a/..b/..", ws + "/a", true},
		// Linux's NAME_MAX and PATH_MAX: the caller's error, not a
		// failure of the sandbox's SFTP server (once a 500).
		{strings.Repeat("a", 255), ws + "/" + strings.Repeat("a", 255), true},
		{strings.Repeat("a", 256), "", false},
		{strings.Repeat("a", 5000), "", false},
		{strings.Repeat("abcdefgh/", 460), "", false},
	} {
		got, err := podfiles.ResolvePath(ws, tc.rel)
		if tc.ok && (err != nil || got != tc.want) {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q", tc.rel, got, err, tc.want)
		}
		if !tc.ok && !errors.Is(err, podfiles.ErrInvalidPath) {
			t.Errorf("ResolvePath(%q) = %q, %v; want ErrInvalidPath", tc.rel, got, err)
		}
	}
	if _, err := podfiles.ResolvePath("relative", "a"); err == nil {
		t.Error("relative workspace accepted")
	}
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"", ".", "a", "a/b", "..", "../a", "a/../..", "/abs", "a\x00", "./../a", "a/./b/../../..", "....", "a//b", "é/..", "\\..\\x"} {
		f.Add(s)
	}
	const ws = "/srv/sandbox/workspace"
	f.Fuzz(func(t *testing.T, rel string) {
		got, err := podfiles.ResolvePath(ws, rel)
		if err != nil {
			if !errors.Is(err, podfiles.ErrInvalidPath) {
				t.Fatalf("error %v is not ErrInvalidPath", err)
			}
			return
		}
		if got != ws && !strings.HasPrefix(got, ws+"/") {
			t.Fatalf("ResolvePath(%q) = %q escapes %q", rel, got, ws)
		}
		if path.Clean(got) != got || strings.ContainsRune(got, 0) {
			t.Fatalf("ResolvePath(%q) = %q is not clean", rel, got)
		}
		for _, part := range strings.Split(strings.TrimPrefix(got, ws), "/") {
			if part == ".." {
				t.Fatalf("ResolvePath(%q) = %q keeps a .. element", rel, got)
			}
		}
	})
}
