package sandboxinit

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

func TestCheckEnv(t *testing.T) {
	const secret = "hunter2-secret"
	for _, tc := range []struct {
		name string
		env  []string
		ok   bool
	}{
		{"none", nil, true},
		{"plain", []string{"HTTP_PROXY=http://u:p@10.0.0.1:3128", "EMPTY="}, true},
		{"printable", []string{`V=say "hi" \ it's é #1 $HOME ` + secret}, true},
		{"newline", []string{"V=two\nlines " + secret}, false},
		{"carriage return", []string{"V=a\r" + secret}, false},
		{"tab", []string{"V=a\t" + secret}, false},
		{"NUL", []string{"V=a\x00" + secret}, false},
		{"DEL", []string{"V=a\x7f" + secret}, false},
		{"no equals", []string{"V" + secret}, false},
		{"bad name", []string{"1V=" + secret}, false},
		{"space in name", []string{"A B=" + secret}, false},
		{"twice", []string{"V=1", "V=" + secret}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := initproto.CheckEnv(tc.env)
			if (err == nil) != tc.ok {
				t.Fatalf("initproto.CheckEnv(%q) = %v; want ok=%v", tc.env, err, tc.ok)
			}
			if err != nil && strings.Contains(err.Error(), secret) {
				t.Errorf("the error %q shows the value", err)
			}
			b, err := initproto.EncodeEnv(tc.env)
			if (err == nil) != tc.ok {
				t.Fatalf("initproto.EncodeEnv: %v", err)
			}
			if !tc.ok {
				return
			}
			back, err := initproto.ParseEnv(b)
			if err != nil || len(back) != len(tc.env) {
				t.Fatalf("initproto.ParseEnv(initproto.EncodeEnv(%q)) = %q, %v", tc.env, back, err)
			}
		})
	}
	if _, err := initproto.ParseEnv([]byte(`{"V":"` + secret + `"}`)); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("initproto.ParseEnv of an object: %v; want an error without the value", err)
	}
	if _, err := initproto.ParseEnv([]byte(`["V=` + secret)); err == nil || strings.Contains(err.Error(), secret) {
		t.Errorf("initproto.ParseEnv of broken JSON: %v; want an error without the value", err)
	}
}

// TestSSHDConfigSetEnvQuoting: each pair is one double-quoted argument
// on one SetEnv line, with only '"' and '\' escaped (sshd's argv_split);
// TestInitDeliversEnv proves what the real sshd makes of it.
func TestSSHDConfigSetEnvQuoting(t *testing.T) {
	conf := SSHDConfig{HostKey: "/k", CAKeys: "/ca", PidFile: "/p",
		SetEnv: []string{"A=1", `B=say "hi" \ #x`, "C=it's é"}}.String()
	var lines []string
	for l := range strings.SplitSeq(conf, "\n") {
		if strings.HasPrefix(l, "SetEnv ") {
			lines = append(lines, l)
		}
	}
	want := `SetEnv "A=1" "B=say \"hi\" \\ #x" "C=it's é"`
	if len(lines) != 1 || lines[0] != want {
		t.Errorf("SetEnv lines %q; want [%q]", lines, want)
	}
}

// lockedBuffer is the init's log, written by its goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestInitDeliversEnv runs the init with the real sshd as a warm pod
// has it: booted before its Secret holds keys; the claim writes keys and
// the sandbox's environment. Every SSH exec sees the environment, values
// with spaces, quotes, backslashes, '#', '$' and UTF-8 as sent; a
// service the init starts sees it; a changed environment reaches new
// sessions; an environment that cannot be delivered (a newline) is
// refused and the previous stays, and no value shows in the init's log.
func TestInitDeliversEnv(t *testing.T) {
	if _, err := exec.LookPath("/usr/sbin/sshd"); err != nil {
		t.Fatalf("sshd is required: %v", err)
	}
	self := inittest.Build(t)
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, key, _ := sshca.GenerateKey()
	dir := t.TempDir()
	secret, home, ws := filepath.Join(dir, "secret"), filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for _, d := range []string{secret, home, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sshPort := freePort(t)
	login := "root"
	if u := os.Getenv("USER"); u != "" {
		login = u
	}
	var logBuf lockedBuffer
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- RunInit(ctx, InitConfig{
			SecretDir: secret, RunDir: filepath.Join(dir, "run"), HomeDir: home, Workspace: ws,
			ListenAddr: "127.0.0.1", SSHPort: sshPort, User: login, SSHD: "/usr/sbin/sshd",
			Self: self, WatchInterval: 20 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunInit: %v", err)
		}
	})

	const cred = "sbx_px_Zq9secretcredential"
	const tricky = `say "hi" \ it's é #1 $HOME ` + "`id`"
	env1 := []string{"HTTP_PROXY=http://sbx-env:" + cred + "@127.0.0.1:3128", "NO_PROXY=localhost,127.0.0.1", "TRICKY=" + tricky, "EMPTY="}
	envJSON := func(env []string) []byte {
		b, err := initproto.EncodeEnv(env)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	files := func(env []byte) map[string][]byte {
		return map[string][]byte{"host_key": keyPEM, "user_ca.pub": []byte(ca.AuthorizedKey()), initproto.EnvFile: env}
	}
	// The warm pod's claim, once the init waits for it.
	waitfor.Cond(t, 10*time.Second, "the init waiting for the secret", func() bool {
		return strings.Contains(logBuf.String(), "waiting for the secret")
	})
	if err := inittest.WriteSecret(secret, 1, files(envJSON(env1))); err != nil {
		t.Fatal(err)
	}
	addr := "127.0.0.1:" + strconv.Itoa(sshPort)
	waitKey := func() {
		var err error
		if waitfor.Try(t, 20*time.Second, func() bool { err = podssh.ProbeHostKey(ctx, addr, key.PublicKey()); return err == nil }) {
			return
		}
		t.Fatalf("sshd at %s never presented the host key: %v\ninit log:\n%s", addr, err, logBuf.String())
	}
	waitKey()
	pool := podssh.NewPool(ca, nil)
	defer pool.Close()
	target := podssh.Target{SandboxID: "sbx-env", Addr: addr, User: login, HostKey: string(ssh.MarshalAuthorizedKey(key.PublicKey()))}
	run := func(cmd string) string {
		t.Helper()
		res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: cmd})
		if err != nil {
			t.Fatalf("exec %q: %v", cmd, err)
		}
		return string(res.Stdout)
	}
	got := run(`printf '%s|' "$HTTP_PROXY" "$NO_PROXY" "$TRICKY" "${EMPTY-unset}"`)
	if want := "http://sbx-env:" + cred + "@127.0.0.1:3128|localhost,127.0.0.1|" + tricky + "||"; got != want {
		t.Errorf("session env:\n got %q\nwant %q", got, want)
	}

	// A service the init starts, through its subsystem.
	c, err := pool.Client(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(ws, "svc-env")
	svc := initproto.Service{Name: "envdump", Command: `printf '%s|' "$HTTP_PROXY" "$TRICKY" > ` + out + `.tmp && mv ` + out + `.tmp ` + out + `; exec sleep 600`}
	if _, err := (initproto.Client{SSH: c}).Sync(ctx, []initproto.Service{svc}); err != nil {
		t.Fatalf("sync: %v", err)
	}
	var b []byte
	waitfor.Try(t, 10*time.Second, func() bool { b, err = os.ReadFile(out); return err == nil })
	if want := "http://sbx-env:" + cred + "@127.0.0.1:3128|" + tricky + "|"; string(b) != want {
		t.Errorf("service env: %q, %v; want %q", b, err, want)
	}

	// A changed environment (a new gateway credential): new sessions
	// get it once the init has reinstalled.
	pool.Forget("sbx-env")
	env2 := []string{"HTTP_PROXY=http://sbx-env:sbx_px_second@127.0.0.1:3129"}
	if err := inittest.WriteSecret(secret, 2, files(envJSON(env2))); err != nil {
		t.Fatal(err)
	}
	var last string
	waitfor.Try(t, 20*time.Second, func() bool {
		res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: `printf '%s|%s' "$HTTP_PROXY" "${TRICKY-unset}"`})
		if err == nil {
			if last = string(res.Stdout); last == "http://sbx-env:sbx_px_second@127.0.0.1:3129|unset" {
				return true
			}
		}
		pool.Forget("sbx-env")
		return false
	})
	if last != "http://sbx-env:sbx_px_second@127.0.0.1:3129|unset" {
		t.Errorf("after the env changed, sessions see %q", last)
	}

	// A value with a newline cannot be one sshd_config line: refused,
	// the previous install stays, the value is not logged.
	const leaked = "line-two-secret-value"
	bad := []byte(`["HTTP_PROXY=http://x", "BAD=one\n` + leaked + `"]`)
	if err := inittest.WriteSecret(secret, 3, files(bad)); err != nil {
		t.Fatal(err)
	}
	if !waitfor.Try(t, 10*time.Second, func() bool { return strings.Contains(logBuf.String(), "BAD: the value holds a control character") }) {
		t.Errorf("the refused env is not in the init's log:\n%s", logBuf.String())
	}
	pool.Forget("sbx-env")
	if got := run(`printf '%s' "$HTTP_PROXY"`); got != "http://sbx-env:sbx_px_second@127.0.0.1:3129" {
		t.Errorf("after a refused env, sessions see HTTP_PROXY=%q; want the previous", got)
	}
	for _, s := range []string{cred, "sbx_px_second", leaked, "it's é"} {
		if strings.Contains(logBuf.String(), s) {
			t.Errorf("the init's log shows a value (%q):\n%s", s, logBuf.String())
		}
	}
}
