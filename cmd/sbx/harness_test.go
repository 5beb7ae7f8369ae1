package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/internal/testkit/apicheck"
	"github.com/sbxedge/sbx/internal/testkit/kubetest"
	"github.com/sbxedge/sbx/internal/testkit/redistest"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
	"go.uber.org/goleak"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
	binDir    string
)

// TestMain removes the built binary and then proves the tests' own
// process (the CLI commands run in process, the harness) ended every
// goroutine it started.
func TestMain(m *testing.M) {
	if os.Getenv(runAsCLI) == "1" {
		// The test binary standing in for sbx (cliCommand): no build.
		os.Exit(execute(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	code := kubetest.WithCluster(m).Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runAsCLI set to 1 makes the test binary run as sbx itself.
const runAsCLI = "SBX_TEST_RUN_AS_CLI"

// cliExecutable is a program that runs as sbx, with the environment a
// child needs for it, for tests that need a process but not the real
// build (sbxBinary): the test binary itself.
func cliExecutable(t *testing.T) (path string, env []string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe, append(os.Environ(), runAsCLI+"=1")
}

// sbxBinary builds the real binary once per test run.
func sbxBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sbx-e2e-bin-")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "sbx")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr picks a port for `sbx dev` to bind after this returns, below
// the ephemeral range (see redistest.FreeAddr).
func freeAddr(t *testing.T) string { return redistest.FreeAddr(t) }

// devProc is one running `sbx dev`.
type devProc struct {
	t       *testing.T
	cmd     *exec.Cmd
	API     string
	Metrics string // base URL of the metrics listener
	DataDir string
	DBURL   string
	Token   string
	log     *lockedBuffer // its stdout and stderr
	waited  chan error
	client  *http.Client
}

type lockedBuffer struct {
	mu sync.Mutex
	bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.Buffer.Write(p)
}

// ReadFrom hides bytes.Buffer's, which io.Copy (os/exec copying a child's
// output here) would call instead of Write, around the lock.
func (b *lockedBuffer) ReadFrom(r io.Reader) (int64, error) {
	return io.Copy(struct{ io.Writer }{b}, r)
}

// startDev runs the binary on free ports and waits for /readyz.
func startDev(t *testing.T, dataDir, dbURL string, extra ...string) *devProc {
	t.Helper()
	return startDevEnv(t, nil, dataDir, dbURL, extra...)
}

// startDevEnv is startDev with env added to the process's environment.
// The ports are picked free and then bound by the child, so another test
// can take one in between: a start that fails on that alone is tried
// again on fresh ports, twice at most.
func startDevEnv(t *testing.T, env []string, dataDir, dbURL string, extra ...string) *devProc {
	t.Helper()
	for attempt := 1; ; attempt++ {
		p, out, err := tryStartDev(t, env, dataDir, dbURL, extra...)
		if err == nil {
			return p
		}
		if attempt < 3 && strings.Contains(out, "address already in use") {
			t.Logf("sbx dev, attempt %d: %v; again on fresh ports", attempt, err)
			continue
		}
		t.Fatalf("%v\n%s", err, out)
	}
}

// tryStartDev starts sbx dev on free ports and waits for /readyz. If the
// process exits first, it returns why, with the process's output.
func tryStartDev(t *testing.T, env []string, dataDir, dbURL string, extra ...string) (*devProc, string, error) {
	t.Helper()
	api, metrics := freeAddr(t), freeAddr(t)
	args := append([]string{"dev", "--data-dir", dataDir, "--api-addr", api, "--metrics-addr", metrics, "--ssh-addr", freeAddr(t), "--preview-addr", freeAddr(t), "--egress-addr", freeAddr(t),
		"--reap-interval", "1s", "--log-level", "debug"}, extra...)
	if dbURL != "" {
		args = append(args, "--database-url", dbURL)
	}
	cmd := exec.Command(sbxBinary(t), args...)
	logBuf := &lockedBuffer{}
	cmd.Stdout, cmd.Stderr = logBuf, logBuf
	cmd.Env = append(append(os.Environ(), "SBX_DEV_TOKEN="), env...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &devProc{t: t, cmd: cmd, log: logBuf, API: "http://" + api, Metrics: "http://" + metrics, DataDir: dataDir, DBURL: dbURL, waited: make(chan error, 1)}
	go func() { p.waited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-p.waited
		}
		if t.Failed() {
			logBuf.mu.Lock()
			t.Logf("sbx dev log:\n%s", logBuf.String())
			logBuf.mu.Unlock()
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(p.API + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-p.waited:
			p.waited <- err
			logBuf.mu.Lock()
			defer logBuf.mu.Unlock()
			return nil, logBuf.String(), fmt.Errorf("sbx dev exited before ready: %w", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sbx dev not ready after 60s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	tok, err := os.ReadFile(filepath.Join(dataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	p.Token = strings.TrimSpace(string(tok))
	p.client = &http.Client{Transport: &apicheck.Transport{T: t, C: apicheck.New(t, controlapi.OpenAPI())}}
	return p, "", nil
}

// stop sends SIGINT and waits for a clean exit.
func (p *devProc) stop() {
	p.t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-p.waited:
		if err != nil {
			p.t.Errorf("sbx dev exited with %v after SIGINT", err)
		}
	case <-time.After(40 * time.Second):
		p.t.Fatal("sbx dev did not stop within 40s of SIGINT")
	}
}

// crash kills the process with SIGKILL, as a machine failure would.
func (p *devProc) crash() {
	p.t.Helper()
	_ = p.cmd.Process.Kill()
	<-p.waited
}

// call sends a JSON request (body may be nil) and decodes a JSON answer.
func (p *devProc) call(method, path string, body any, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, p.API+path, rd)
	req.Header.Set("Authorization", "Bearer "+p.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			p.t.Fatalf("%s %s: decode %q: %v", method, path, b, err)
		}
	}
	return resp.StatusCode
}

type sbView struct {
	ID        string  `json:"id"`
	Status    string  `json:"status"`
	EndReason *string `json:"end_reason"`
	Workspace *string `json:"workspace"`
}

// waitStatus polls GET until the sandbox reaches want or limit passes.
func (p *devProc) waitStatus(id, want string, limit time.Duration) sbView {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	var sb sbView
	for {
		if code := p.call("GET", "/api/v1/sandboxes/"+id, nil, &sb); code != 200 {
			p.t.Fatalf("GET sandbox %s: status %d", id, code)
		}
		if sb.Status == want {
			return sb
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("sandbox %s is %s after %s, want %s", id, sb.Status, limit, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// forEachBackend runs f in parallel subtests on SQLite (dbURL "") and on a
// fresh Postgres database.
func forEachBackend(t *testing.T, f func(t *testing.T, dbURL string)) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			dbURL := ""
			if backend == "postgres" {
				dbURL = testdb.Postgres(t)
			}
			f(t, dbURL)
		})
	}
}

// openStore opens the same database the process used, to read the ledger.
func openStore(t *testing.T, dataDir, dbURL string) store.Store {
	t.Helper()
	ctx := context.Background()
	var st store.Store
	var err error
	if dbURL != "" {
		st, err = postgres.Open(ctx, dbURL, nil)
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dataDir, "sbx.db"), nil)
	}
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
