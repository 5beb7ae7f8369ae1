package sshbroker

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/internal/sshdtest"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstream is a sandbox's SSH server as the broker sees it. The suite runs
// against the machine's OpenSSH sshd; other servers (the local provider's
// embedded one) can be plugged in through startUpstream.
type upstream struct {
	Addr, HostKey, User string
}

var startUpstream = func(t testing.TB, ca *sshca.CA) upstream {
	s := sshdtest.Start(t, ca.AuthorizedKey())
	return upstream{Addr: s.Addr, HostKey: s.HostKey, User: s.User}
}

// fakeAuthorizer maps fingerprints to credentials. mu guards creds.
type fakeAuthorizer struct {
	mu    sync.Mutex
	creds map[string]cred
	calls int
}

type cred struct {
	username string // sandbox name the key is bound to
	route    Route
	err      error // refusal to report for the right username
	// answer, when set, is what control answers for the right username,
	// called without the fake's lock: it may block, as a slow control does.
	answer func(context.Context) error
}

func (f *fakeAuthorizer) Authorize(ctx context.Context, username, fp string) (Route, error) {
	f.mu.Lock()
	f.calls++
	c, ok := f.creds[fp]
	f.mu.Unlock()
	if !ok {
		return Route{}, ErrUnknownKey
	}
	if c.username != username {
		return Route{}, ErrWrongSandbox
	}
	if c.answer != nil {
		if err := c.answer(ctx); err != nil {
			return Route{}, err
		}
	}
	if c.err != nil {
		return Route{}, c.err
	}
	return c.route, nil
}

// update changes the credential of key fp in place.
func (f *fakeAuthorizer) update(fp string, change func(*cred)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.creds[fp]
	change(&c)
	f.creds[fp] = c
}

// recActivity records Open calls.
type recActivity struct {
	mu     sync.Mutex
	opened []string
	open   map[string]int
	marks  map[string]int
}

func (a *recActivity) Mark(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.marks[id]++
}

func (a *recActivity) Open(id string) func() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.opened = append(a.opened, id)
	a.open[id]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		a.open[id]--
	}
}

type env struct {
	t        testing.TB
	dir      string
	ca       *sshca.CA
	caPEM    []byte
	up       upstream
	auth     *fakeAuthorizer
	act      *recActivity
	reg      *prometheus.Registry
	broker   *Broker
	addr     string // broker 127.0.0.1:port
	port     string
	known    string // known_hosts file naming the broker's key
	serveErr chan error
}

// newEnv starts an upstream sshd and a broker in front of it. tweak may
// adjust the config before New.
func newEnv(t testing.TB, tweak func(*Config)) *env {
	t.Helper()
	ca, caPEM, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	e := &env{
		t: t, dir: t.TempDir(), ca: ca, caPEM: caPEM,
		auth: &fakeAuthorizer{creds: map[string]cred{}},
		act:  &recActivity{open: map[string]int{}, marks: map[string]int{}},
		reg:  prometheus.NewRegistry(),
	}
	e.up = startUpstream(t, ca)
	keys, err := LoadOrCreateHostKeys(filepath.Join(e.dir, "hostkeys"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.HostKeys = keys
	cfg.Authorizer = e.auth
	cfg.CA = ca
	cfg.Activity = e.act
	cfg.Registry = e.reg
	cfg.Logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.broker, e.addr = b, ln.Addr().String()
	_, e.port, _ = net.SplitHostPort(e.addr)
	e.serveErr = make(chan error, 1)
	go func() { e.serveErr <- b.Serve(ln) }()
	t.Cleanup(func() {
		b.Close()
		if err := <-e.serveErr; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	})
	var kh bytes.Buffer
	for _, k := range keys {
		fmt.Fprintf(&kh, "[127.0.0.1]:%s %s", e.port, ssh.MarshalAuthorizedKey(k.PublicKey()))
	}
	e.known = filepath.Join(e.dir, "known_hosts")
	if err := os.WriteFile(e.known, kh.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return e
}

// testWriter sends broker logs to t.Log, and stops once the test is over
// so a late log line cannot panic.
type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// key is a client credential: a private key file and its fingerprint.
type key struct {
	path   string
	fp     string
	signer ssh.Signer
}

func (e *env) newKey(name string) key {
	e.t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		e.t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		e.t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		e.t.Fatal(err)
	}
	path := filepath.Join(e.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(signer.PublicKey()), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return key{path: path, fp: ssh.FingerprintSHA256(signer.PublicKey()), signer: signer}
}

// grant makes a new key that is a credential for sandbox, refused with
// refusal when it is non-nil.
func (e *env) grant(sandbox string, refusal error) key {
	e.t.Helper()
	k := e.newKey("key-" + sandbox + "-" + strconv.Itoa(len(e.auth.creds)))
	e.auth.mu.Lock()
	defer e.auth.mu.Unlock()
	e.auth.creds[k.fp] = cred{username: sandbox, err: refusal, route: Route{
		SandboxID: sandbox, Addr: e.up.Addr, User: e.up.User, HostKey: e.up.HostKey,
		ExpiresAt: time.Now().Add(time.Hour),
	}}
	return k
}

// sshArgs are the options every OpenSSH client invocation in the tests
// uses: strict host key checking against the broker's key, only our key.
func (e *env) sshArgs(k key, extra ...string) []string {
	args := []string{
		"-F", "/dev/null",
		"-o", "UserKnownHostsFile=" + e.known,
		"-o", "GlobalKnownHostsFile=/dev/null",
		"-o", "StrictHostKeyChecking=yes",
		"-o", "IdentitiesOnly=yes",
		"-o", "BatchMode=yes",
		"-o", "ConnectTimeout=20",
		"-i", k.path,
	}
	return append(args, extra...)
}

// ssh builds an ssh command to user@broker running remote (if any).
func (e *env) ssh(ctx context.Context, k key, user string, opts []string, remote ...string) *exec.Cmd {
	args := e.sshArgs(k, opts...)
	args = append(args, "-p", e.port, user+"@127.0.0.1")
	args = append(args, remote...)
	return exec.CommandContext(ctx, "ssh", args...)
}

type result struct {
	stdout, stderr string
	code           int
}

func run(t testing.TB, cmd *exec.Cmd, stdin io.Reader) result {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, &out, &errb
	err := cmd.Run()
	code := 0
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("run %v: %v", cmd.Args, err)
		}
		code = ee.ExitCode()
	}
	return result{out.String(), errb.String(), code}
}

// sshCeiling bounds one ssh invocation. It is a hang detector, not a
// speed limit: on a loaded 2-core CI machine a trivial `false` through
// broker and sshd took 14 s and two commands overran the old 30 s (sshd
// had started them and not yet sent anything back), failing a broker that
// behaved correctly.
const sshCeiling = 2 * time.Minute

// testCtx is a context that ends with the test or after d.
var testCtx = sshscenario.Ctx

type fakeCA struct{}

func (fakeCA) UserSigner(string, string, time.Duration) (ssh.Signer, error) {
	return nil, errors.New("fake")
}

func generateSigner() ([]byte, ssh.Signer, error) { return sshca.GenerateKey() }

func splitHostPort(addr string) (string, string, error) { return net.SplitHostPort(addr) }
