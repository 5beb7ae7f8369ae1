// Package s3test runs a real S3-compatible server for tests and load
// tests: SeaweedFS's `weed server -s3` (master, volume server, filer and
// S3 gateway in one process) on free loopback ports, its data in a
// temporary folder, with one static admin identity.
//
// The weed binary is built by `make s3-bins` from the version pinned in
// ../s3bins into a cache folder outside the repository; SBX_S3_BINS names
// that folder. Without it tests skip, naming make s3-bins, unless
// SBX_S3_REQUIRED=1 (make test sets it), when they fail.
package s3test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/objstore"
)

const (
	// EnvBins names the folder holding the weed binary.
	EnvBins = "SBX_S3_BINS"
	// EnvRequired, set to 1, turns a missing binary into a failure.
	EnvRequired = "SBX_S3_REQUIRED"
)

// ErrNoBinaries is returned when SBX_S3_BINS is unset or lacks weed.
var ErrNoBinaries = errors.New("s3test: weed not found: run `make s3-bins` and set " + EnvBins + " (make test does both)")

// Bin returns the path of weed.
func Bin() (string, error) {
	dir := os.Getenv(EnvBins)
	if dir == "" {
		return "", ErrNoBinaries
	}
	p := filepath.Join(dir, "weed")
	if st, err := os.Stat(p); err != nil || st.IsDir() {
		return "", fmt.Errorf("%w (missing %s)", ErrNoBinaries, p)
	}
	return p, nil
}

// Required reports whether a missing server must fail tests rather than
// skip them.
func Required() bool { return os.Getenv(EnvRequired) == "1" }

// Server is a running weed server with its S3 gateway.
type Server struct {
	// Endpoint is the S3 API's host:port (plain HTTP).
	Endpoint string
	// AccessKey and SecretKey are the admin identity's.
	AccessKey, SecretKey string
	// StartTime is how long Start took, until an object could be written.
	StartTime time.Duration

	sockDir string
	cmd     *exec.Cmd
	done    chan struct{}
	out     *tailBuffer
	once    sync.Once
}

// Start runs weed with its data under dir (which the caller removes) and
// waits until the S3 API stores an object.
func Start(ctx context.Context, dir string) (*Server, error) {
	began := time.Now()
	bin, err := Bin()
	if err != nil {
		return nil, err
	}
	// Two tries: the free ports are released before weed binds them, so
	// another process can take one in between.
	var last error
	for range 2 {
		s, err := start(ctx, bin, dir)
		if err == nil {
			s.StartTime = time.Since(began)
			return s, nil
		}
		last = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, last
}

func start(ctx context.Context, bin, dir string) (*Server, error) {
	ports, err := freePorts(8)
	if err != nil {
		return nil, err
	}
	// Unix socket paths are capped near 108 bytes; a test's TempDir is
	// often longer, so the sockets get a short folder of their own.
	sockDir, err := os.MkdirTemp("", "sbx-s3-")
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "weed")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return nil, err
	}
	s := &Server{
		Endpoint:  "127.0.0.1:" + strconv.Itoa(ports[6]),
		AccessKey: "sbxtest" + randHex(6),
		SecretKey: randHex(20),
		sockDir:   sockDir,
		done:      make(chan struct{}),
		out:       &tailBuffer{max: 64 << 10},
	}
	p := func(i int) string { return strconv.Itoa(ports[i]) }
	cmd := exec.Command(bin, "server",
		"-ip=127.0.0.1", "-ip.bind=127.0.0.1",
		"-dir="+data,
		"-master.port="+p(0), "-master.port.grpc="+p(1),
		"-volume.port="+p(2), "-volume.port.grpc="+p(3),
		"-filer.port="+p(4), "-filer.port.grpc="+p(5),
		"-s3", "-s3.port="+p(6), "-s3.port.grpc="+p(7),
		// Extra listeners the tests do not use, each on a fixed port that
		// two servers would fight over.
		"-s3.port.iceberg=0", "-s3.port.lance=0",
		"-filer.localSocket="+filepath.Join(sockDir, "filer.sock"),
		"-s3.localSocket="+filepath.Join(sockDir, "s3.sock"),
		// No network beyond loopback, and nothing to report to.
		"-master.telemetry=false",
		// Small volumes: a test writes megabytes, and the default 30 GB
		// volume limit only matters for disk accounting.
		"-master.volumeSizeLimitMB=1024", "-volume.max=0",
	)
	// weed reads the admin identity from the environment (s3api's
	// auth_credentials.go), which keeps the secret off the command line.
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+s.AccessKey, "AWS_SECRET_ACCESS_KEY="+s.SecretKey)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = s.out, s.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		os.RemoveAll(sockDir)
		return nil, fmt.Errorf("s3test: start weed: %w", err)
	}
	s.cmd = cmd
	go func() { _ = cmd.Wait(); close(s.done) }()
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// waitReady writes, reads and deletes a probe object until it works: the
// S3 port answers before the volume server has registered with the
// master, and a write then fails.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	st, err := objstore.New(s.Config("sbx-s3test-probe"))
	if err != nil {
		return err
	}
	var last error
	for {
		select {
		case <-s.done:
			return fmt.Errorf("s3test: weed exited while starting:\n%s", s.out.String())
		default:
		}
		last = probe(ctx, st)
		if last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("s3test: weed not ready: %w (last: %v)\n%s", ctx.Err(), last, s.out.String())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func probe(ctx context.Context, st *objstore.Store) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := st.EnsureBucket(ctx); err != nil {
		return err
	}
	if _, err := st.Put(ctx, "probe", strings.NewReader("ok"), objstore.PutOptions{}); err != nil {
		return err
	}
	var b bytes.Buffer
	if _, err := st.Get(ctx, "probe", &b); err != nil {
		return err
	}
	return st.Delete(ctx, "probe")
}

// Config is an objstore configuration for bucket on this server.
func (s *Server) Config(bucket string) objstore.Config {
	return objstore.Config{Endpoint: s.Endpoint, Bucket: bucket, AccessKey: s.AccessKey, SecretKey: s.SecretKey}
}

// Store returns a Store for a new bucket of its own.
func (s *Server) Store(ctx context.Context, bucket string) (*objstore.Store, error) {
	st, err := objstore.New(s.Config(bucket))
	if err != nil {
		return nil, err
	}
	return st, st.EnsureBucket(ctx)
}

// Output is the tail of weed's log.
func (s *Server) Output() string { return s.out.String() }

// Stop ends weed (SIGTERM, then SIGKILL after 10 s) and waits for it.
// The caller removes the data folder.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
		os.RemoveAll(s.sockDir)
	})
}

// Need skips t when the weed binary is missing, or fails it when
// SBX_S3_REQUIRED=1 (make test sets it, so CI never skips).
func Need(t testing.TB) {
	t.Helper()
	if _, err := Bin(); err != nil {
		if Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// New starts a server for t, stopped when t ends. Without the binary it
// skips t, or fails it when SBX_S3_REQUIRED=1 (Need).
func New(t testing.TB) *Server {
	t.Helper()
	Need(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := Start(ctx, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Logf("weed server -s3 on %s, ready in %s", s.Endpoint, s.StartTime.Round(time.Millisecond))
	return s
}

// Bucket returns a name unique to this call, valid as an S3 bucket.
func Bucket(prefix string) string { return strings.ToLower(prefix) + "-" + randHex(4) }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// freePorts reserves n distinct loopback ports. They are released before
// weed binds them; Start retries once if one was taken meanwhile.
func freePorts(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - b.max; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
