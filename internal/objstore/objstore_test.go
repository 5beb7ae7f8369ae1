package objstore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/objstore"
	"github.com/sbxedge/sbx/internal/objstore/s3test"
)

var (
	serverOnce sync.Once
	server     *s3test.Server
	serverErr  error
	serverDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if server != nil {
		server.Stop()
	}
	if serverDir != "" {
		os.RemoveAll(serverDir)
	}
	if code == 0 {
		// minio-go keeps idle HTTP connections; their goroutines end with
		// the transport, which the tests do not own.
		if err := goleak.Find(goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait")); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}

// store is a Store on the package's weed server (started on first use),
// in a bucket of the test's own.
func store(t *testing.T, cfg func(*objstore.Config)) *objstore.Store {
	t.Helper()
	s3test.Need(t)
	serverOnce.Do(func() {
		serverDir, serverErr = os.MkdirTemp("", "sbx-objstore-test-")
		if serverErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		server, serverErr = s3test.Start(ctx, serverDir)
		if serverErr == nil {
			t.Logf("weed server -s3 on %s, ready in %s", server.Endpoint, server.StartTime.Round(time.Millisecond))
		}
	})
	if serverErr != nil {
		t.Fatal(serverErr)
	}
	c := server.Config(s3test.Bucket("objstore"))
	c.PartSize = objstore.MinPartSize
	if cfg != nil {
		cfg(&c)
	}
	st, err := objstore.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.EnsureBucket(t.Context()); err != nil {
		t.Fatal(err)
	}
	return st
}

// bundle is n bytes shaped like a VM's memory: runs of zero pages, random
// pages and repetitive text.
func bundle(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for off := 0; off < n; off += 4096 {
		page := b[off:min(off+4096, n)]
		switch r.IntN(3) {
		case 0: // zero page
		case 1:
			for i := range page {
				page[i] = byte(r.Uint32())
			}
		case 2:
			copy(page, bytes.Repeat([]byte("func main() { println(\"hello\") }\n"), 200))
		}
	}
	return b
}

func TestPutGetRoundTrip(t *testing.T) {
	st := store(t, nil)
	tests := []struct {
		name        string
		size        int
		compression objstore.Compression
		putParallel int
		getParallel int
	}{
		{"empty", 0, objstore.None, 1, 1},
		{"empty zstd", 0, objstore.Zstd, 4, 4},
		{"small", 1000, objstore.None, 4, 4},
		{"small zstd", 1000, objstore.Zstd, 1, 1},
		// 23 MiB is five 5 MiB parts: multipart, last part short.
		{"multipart serial", 23 << 20, objstore.None, 1, 1},
		{"multipart parallel", 23 << 20, objstore.None, 4, 4},
		{"multipart zstd parallel", 23 << 20, objstore.Zstd, 4, 8},
		{"part boundary", 10 << 20, objstore.None, 8, 3},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := bundle(tc.size, uint64(i))
			key := "bundles/" + tc.name
			stored, err := st.Put(t.Context(), key, bytes.NewReader(data), objstore.PutOptions{Compression: tc.compression, Parallel: tc.putParallel})
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Stat(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			if info.Stored != stored || info.Compression != tc.compression {
				t.Errorf("Stat = %+v, want Stored %d and compression %q", info, stored, tc.compression)
			}
			if tc.compression == objstore.None && stored != int64(tc.size) {
				t.Errorf("stored %d bytes uncompressed, want %d", stored, tc.size)
			}
			if tc.compression == objstore.Zstd && tc.size > 1<<20 && stored > int64(tc.size)/2 {
				t.Errorf("zstd stored %d of %d bytes; a third zero pages and a third text should halve it", stored, tc.size)
			}
			var got bytes.Buffer
			n, err := st.GetParallel(t.Context(), key, &got, tc.getParallel)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(tc.size) || sha256.Sum256(got.Bytes()) != sha256.Sum256(data) {
				t.Fatalf("Get returned %d bytes (sha differs: %v), want the %d put", n, !bytes.Equal(got.Bytes(), data), tc.size)
			}
		})
	}
}

func TestPutReplaces(t *testing.T) {
	st := store(t, nil)
	for _, s := range []string{"first version", "second"} {
		if _, err := st.Put(t.Context(), "k", bytes.NewReader([]byte(s)), objstore.PutOptions{Compression: objstore.Zstd}); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	if _, err := st.Get(t.Context(), "k", &b); err != nil || b.String() != "second" {
		t.Fatalf("Get = %q, %v; want second", b.String(), err)
	}
	// Replaced by an uncompressed one, the key reads back uncompressed.
	if _, err := st.Put(t.Context(), "k", bytes.NewReader([]byte("third")), objstore.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if _, err := st.Get(t.Context(), "k", &b); err != nil || b.String() != "third" {
		t.Fatalf("Get = %q, %v; want third", b.String(), err)
	}
}

func TestDelete(t *testing.T) {
	st := store(t, nil)
	if _, err := st.Put(t.Context(), "gone", bytes.NewReader(bundle(6<<20, 9)), objstore.PutOptions{Parallel: 2}); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete(t.Context(), "gone"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Get(t.Context(), "gone", io.Discard); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := st.Delete(t.Context(), "gone"); err != nil {
		t.Fatalf("second Delete: %v, want nil (idempotent)", err)
	}
	if _, err := st.Stat(t.Context(), "never"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("Stat of a missing key: %v, want ErrNotFound", err)
	}
}

// failingReader gives n bytes, then an error: a bundle whose file broke
// mid-upload.
type failingReader struct {
	r io.Reader
}

var errBroken = errors.New("disk read failed")

func (f *failingReader) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	if err == io.EOF {
		return n, errBroken
	}
	return n, err
}

func TestPutFailureLeavesNoObject(t *testing.T) {
	st := store(t, nil)
	for _, c := range []objstore.Compression{objstore.None, objstore.Zstd} {
		for _, parallel := range []int{1, 4} {
			key := "broken-" + string(c)
			_, err := st.Put(t.Context(), key, &failingReader{bytes.NewReader(bundle(12<<20, 3))}, objstore.PutOptions{Compression: c, Parallel: parallel})
			if !errors.Is(err, errBroken) {
				t.Errorf("compression %q parallel %d: Put = %v, want the reader's error", c, parallel, err)
			}
			if _, err := st.Stat(t.Context(), key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("compression %q parallel %d: object after a failed Put: %v", c, parallel, err)
			}
		}
	}
}

// A writer that fails mid-way (the disk filled) stops the download, its
// error comes back, and no range fetch is left running (goleak in
// TestMain).
func TestGetWriterFails(t *testing.T) {
	st := store(t, nil)
	if _, err := st.Put(t.Context(), "big", bytes.NewReader(bundle(40<<20, 4)), objstore.PutOptions{Parallel: 4}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []objstore.Compression{objstore.None, objstore.Zstd} {
		if c == objstore.Zstd {
			if _, err := st.Put(t.Context(), "big", bytes.NewReader(bundle(40<<20, 4)), objstore.PutOptions{Parallel: 4, Compression: c}); err != nil {
				t.Fatal(err)
			}
		}
		for _, parallel := range []int{1, 4} {
			w := &failWriter{after: 12 << 20}
			if _, err := st.GetParallel(t.Context(), "big", w, parallel); !errors.Is(err, errDiskFull) {
				t.Errorf("compression %q parallel %d: Get into a failing writer = %v, want its error", c, parallel, err)
			}
		}
	}
}

var errDiskFull = errors.New("no space left on device")

type failWriter struct{ n, after int }

func (f *failWriter) Write(p []byte) (int, error) {
	if f.n+len(p) > f.after {
		return 0, errDiskFull
	}
	f.n += len(p)
	return len(p), nil
}

func TestConfigValidate(t *testing.T) {
	good := objstore.Config{Endpoint: "127.0.0.1:9000", Bucket: "b", AccessKey: "a", SecretKey: "s"}
	tests := []struct {
		name string
		edit func(*objstore.Config)
		ok   bool
	}{
		{"good", func(*objstore.Config) {}, true},
		{"no endpoint", func(c *objstore.Config) { c.Endpoint = "" }, false},
		{"scheme", func(c *objstore.Config) { c.Endpoint = "http://127.0.0.1:9000" }, false},
		{"no bucket", func(c *objstore.Config) { c.Bucket = "" }, false},
		{"no secret", func(c *objstore.Config) { c.SecretKey = "" }, false},
		{"negative parallel", func(c *objstore.Config) { c.Parallel = -1 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			if err := c.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate = %v, want ok=%v", err, tc.ok)
			}
		})
	}
}
