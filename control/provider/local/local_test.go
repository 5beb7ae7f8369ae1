package local_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/podssh"
)

func TestMain(m *testing.M) {
	if addr := os.Getenv("SBX_TEST_DAEMON_LISTEN"); addr != "" {
		daemon(addr)
		return
	}
	goleak.VerifyTestMain(m)
}

// daemon is what this test binary runs as when a test starts it inside a
// sandbox: a server that writes its PID and holds a port until killed.
func daemon(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		os.Exit(3)
	}
	_ = os.WriteFile(os.Getenv("SBX_TEST_DAEMON_PIDFILE"), []byte(strconv.Itoa(os.Getpid())), 0o600)
	for {
		c, err := ln.Accept()
		if err != nil {
			os.Exit(4)
		}
		c.Close()
	}
}

type fixture struct {
	ca      *sshca.CA
	caPEM   []byte
	hostPEM []byte
	hostKey ssh.PublicKey
	dataDir string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ca, caPEM, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	hostPEM, host, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{ca: ca, caPEM: caPEM, hostPEM: hostPEM, hostKey: host.PublicKey(), dataDir: t.TempDir()}
}

func (f *fixture) spec(id string) provider.Spec {
	return provider.Spec{
		SandboxID: id, HostKeyPEM: f.hostPEM, UserCAKey: f.ca.AuthorizedKey(),
		Files: []provider.File{{Path: ".sbx/grant-token", Mode: 0o600, Data: []byte("tok")}},
	}
}

func (f *fixture) target(id string, ep provider.Endpoint) podssh.Target {
	return podssh.Target{SandboxID: id, Addr: ep.Addr, ForwardAddr: ep.ForwardAddr, User: ep.User,
		HostKey: string(ssh.MarshalAuthorizedKey(f.hostKey)), Workspace: ep.Workspace}
}

func modes(t *testing.T) []string {
	if m := os.Getenv("SBX_TEST_MODE"); m != "" {
		return []string{m}
	}
	return []string{local.ModeEmbedded, local.ModeSSHD}
}

// perMode runs fn as a subtest of each server mode; ctx ends with the
// subtest or after timeout.
func perMode(t *testing.T, timeout time.Duration, fn func(t *testing.T, ctx context.Context, mode string)) {
	for _, mode := range modes(t) {
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), timeout)
			defer cancel()
			fn(t, ctx, mode)
		})
	}
}

// provisioned starts a provider in mode over a fresh fixture and
// provisions id on it; the provider and a pool for it close when the test
// ends.
func provisioned(ctx context.Context, t *testing.T, mode, id string) (*fixture, *local.Local, *podssh.Pool, provider.Endpoint) {
	t.Helper()
	f := newFixture(t)
	l, err := local.New(local.Config{DataDir: f.dataDir, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	pool := podssh.NewPool(f.ca, nil)
	t.Cleanup(func() { pool.Close() })
	ep, err := l.Provision(ctx, f.spec(id))
	if err != nil {
		t.Fatal(err)
	}
	return f, l, pool, ep
}

func TestLifecycle(t *testing.T) {
	perMode(t, time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		const id = "sbx-life"
		f, l, pool, ep := provisioned(ctx, t, mode, id)
		// running is ep as a call that finds the server running (or
		// Status) has it: not saying it started the services.
		running := ep
		running.ServicesStarted = false
		if ep2, err := l.Provision(ctx, f.spec(id)); err != nil || ep2 != running {
			t.Fatalf("second Provision = %+v, %v; want %+v (idempotent)", ep2, err, running)
		}
		if fi, err := os.Stat(filepath.Join(f.dataDir, "sandboxes", id, "host_key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("host_key mode = %v, %v; want 0600", fi.Mode(), err)
		}
		if b, err := os.ReadFile(filepath.Join(f.dataDir, "sandboxes", id, "home", ".sbx/grant-token")); err != nil || string(b) != "tok" {
			t.Errorf("spec file = %q, %v", b, err)
		}
		assertPhase(t, l, id, provider.PhaseRunning)
		list, err := l.List(ctx)
		if err != nil || len(list) != 1 || list[0].SandboxID != id || list[0].Phase != provider.PhaseRunning {
			t.Fatalf("List = %+v, %v", list, err)
		}

		tg := f.target(id, ep)
		res, err := pool.Exec(ctx, tg, podssh.ExecRequest{Command: "echo kept > file.txt && mkdir -p d/e && ln -s file.txt d/link"})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("write file: %+v %v", res, err)
		}
		// A session's home is the sandbox's, in either mode: the files of
		// its spec are there, and the machine user's dotfiles are not.
		res, err = pool.Exec(ctx, tg, podssh.ExecRequest{Command: `printf '%s %s' "$HOME" "$(cat ~/.sbx/grant-token)"`})
		if want := filepath.Join(f.dataDir, "sandboxes", id, "home") + " tok"; err != nil || string(res.Stdout) != want {
			t.Fatalf("session home: %q %q %v; want %q", res.Stdout, res.Stderr, err, want)
		}
		pool.Forget(id)

		if err := l.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := l.Suspend(ctx, id); err != nil {
			t.Fatalf("second Suspend: %v (want idempotent)", err)
		}
		assertPhase(t, l, id, provider.PhaseStopped)
		if _, err := os.Stat(ep.Workspace); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("workspace still present after Suspend: %v", err)
		}

		ep3, err := l.Restore(ctx, f.spec(id))
		if err != nil {
			t.Fatal(err)
		}
		if ep3 != ep {
			t.Errorf("Restore endpoint = %+v, want the same %+v (port reused)", ep3, ep)
		}
		res, err = pool.Exec(ctx, f.target(id, ep3), podssh.ExecRequest{Command: "cat file.txt && readlink d/link && test -d d/e"})
		if err != nil || string(res.Stdout) != "kept\nfile.txt\n" || res.ExitCode != 0 {
			t.Fatalf("after restore: %q exit %d stderr %q, %v", res.Stdout, res.ExitCode, res.Stderr, err)
		}
		pool.Forget(id)

		// A new provider over the same DataDir finds the sandbox again.
		l.Close()
		l, err = local.New(local.Config{DataDir: f.dataDir, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		inst, err := l.Status(ctx, id)
		if err != nil || inst.Phase != provider.PhaseStopped || inst.Reason != "server_not_running" {
			t.Fatalf("Status after restart = %+v, %v", inst, err)
		}
		if err := l.Start(ctx); err != nil {
			t.Fatal(err)
		}
		inst = assertPhase(t, l, id, provider.PhaseRunning)
		if inst.Endpoint != running {
			t.Errorf("endpoint after restart = %+v, want %+v", inst.Endpoint, running)
		}
		res, err = pool.Exec(ctx, f.target(id, inst.Endpoint), podssh.ExecRequest{Command: "cat file.txt"})
		if err != nil || string(res.Stdout) != "kept\n" {
			t.Fatalf("after restart: %q, %v", res.Stdout, err)
		}
		pool.Forget(id)

		// A snapshot that vanished while suspended is reported as gone,
		// not replaced by an empty workspace.
		if err := l.Suspend(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(filepath.Join(f.dataDir, "sandboxes", id, "snapshot.tar.gz")); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Restore(ctx, f.spec(id)); !errors.Is(err, provider.ErrSnapshotGone) {
			t.Fatalf("Restore without its snapshot = %v, want ErrSnapshotGone", err)
		}

		if err := l.Destroy(ctx, id); err != nil {
			t.Fatal(err)
		}
		if err := l.Destroy(ctx, id); err != nil {
			t.Fatalf("second Destroy: %v", err)
		}
		if _, err := l.Status(ctx, id); !errors.Is(err, provider.ErrNotFound) {
			t.Errorf("Status after Destroy = %v, want ErrNotFound", err)
		}
		if _, err := os.Stat(filepath.Join(f.dataDir, "sandboxes", id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("sandbox dir left after Destroy")
		}
	})
}

func assertPhase(t *testing.T, l *local.Local, id string, want provider.Phase) provider.Instance {
	t.Helper()
	inst, err := l.Status(context.Background(), id)
	if err != nil || inst.Phase != want {
		t.Fatalf("Status(%s) = %+v, %v; want phase %s", id, inst, err, want)
	}
	return inst
}

func TestProvisionRejects(t *testing.T) {
	f := newFixture(t)
	l, err := local.New(local.Config{DataDir: f.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx := context.Background()
	for name, spec := range map[string]provider.Spec{
		"bad id":       {SandboxID: "../x", HostKeyPEM: f.hostPEM, UserCAKey: f.ca.AuthorizedKey()},
		"bad host key": {SandboxID: "a1", HostKeyPEM: []byte("nope"), UserCAKey: f.ca.AuthorizedKey()},
		"file escape":  {SandboxID: "a2", HostKeyPEM: f.hostPEM, UserCAKey: f.ca.AuthorizedKey(), Files: []provider.File{{Path: "../../evil", Data: []byte("x")}}},
	} {
		if _, err := l.Provision(ctx, spec); err == nil {
			t.Errorf("%s: Provision succeeded, want error", name)
		}
	}
	if _, err := local.New(local.Config{DataDir: f.dataDir, Mode: "docker"}); err == nil {
		t.Error("unknown mode accepted")
	}
}

// TestOpenSSHClient drives the embedded server with the stock OpenSSH
// client, as the SSH broker and people's terminals will.
func TestOpenSSHClient(t *testing.T) {
	sshBin, err := exec.LookPath("ssh")
	if err != nil {
		t.Fatal("OpenSSH client not installed: install openssh-client (.ci/run does)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f := newFixture(t)
	l, err := local.New(local.Config{DataDir: f.dataDir})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ep, err := l.Provision(ctx, f.spec("ossh"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "id_ed25519")
	certFile := keyFile + "-cert.pub"
	khFile := filepath.Join(dir, "known_hosts")
	writeUserCert(t, f, keyFile, certFile, ep.User)
	host, port, _ := strings.Cut(ep.Addr, ":")
	if err := os.WriteFile(khFile, []byte(knownhosts.Line([]string{knownhosts.Normalize(ep.Addr)}, f.hostKey)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(withCert bool, args ...string) (string, error) {
		base := []string{"-F", "/dev/null", "-i", keyFile, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
			"-o", "UserKnownHostsFile=" + khFile, "-o", "StrictHostKeyChecking=yes", "-p", port}
		if withCert {
			base = append(base, "-o", "CertificateFile="+certFile)
		} else {
			base = append(base, "-o", "CertificateFile=/dev/null")
		}
		if len(args) > 0 && args[0] == "-tt" { // client option, before the destination
			base, args = append(base, "-tt"), args[2:]
		}
		cmd := exec.CommandContext(ctx, sshBin, append(append(base, ep.User+"@"+host), args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run(true, "echo hi; echo \"$PWD\""); err != nil || out != "hi\n"+ep.Workspace+"\n" {
		t.Fatalf("ssh echo hi = %q, %v", out, err)
	}
	if out, err := run(true, "exit 42"); errString(err) != "42" {
		t.Errorf("ssh exit 42 = %q, %v; want exit status 42", out, err)
	}
	if out, err := run(true, "-tt", "--", "tty; stty size"); err != nil || !strings.Contains(out, "/dev/pts/") {
		t.Errorf("ssh -tt tty = %q, %v; want a pty", out, err)
	}
	if os.Rename(certFile, certFile+".off") == nil {
		if out, err := run(false, "echo hi"); err == nil {
			t.Errorf("plain key without certificate logged in: %q", out)
		}
		os.Rename(certFile+".off", certFile)
	}
}

func errString(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return strconv.Itoa(ee.ExitCode())
	}
	return ""
}

// writeUserCert writes an ed25519 key and a CA-signed certificate for
// principal where the OpenSSH client can read them.
func writeUserCert(t *testing.T, f *fixture, keyFile, certFile, principal string) {
	t.Helper()
	keyPEM, key, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	caSigner, err := ssh.ParsePrivateKey(f.caPEM)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	cert := &ssh.Certificate{
		Key: key.PublicKey(), CertType: ssh.UserCert, KeyId: "openssh-test",
		ValidPrincipals: []string{principal},
		ValidAfter:      uint64(now.Add(-time.Minute).Unix()), ValidBefore: uint64(now.Add(time.Hour).Unix()),
		Permissions: ssh.Permissions{Extensions: map[string]string{"permit-pty": "", "permit-port-forwarding": ""}},
	}
	if err := cert.SignCert(rand.Reader, caSigner); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestEndsDetachedProcesses: a server a user started in the sandbox and
// detached (a double fork into a new session, as dev servers daemonise)
// keeps no port after Destroy, Suspend, or the provider's Close (sbx dev
// exiting). Process groups alone do not reach it.
func TestEndsDetachedProcesses(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range modes(t) {
		for _, end := range []string{"destroy", "suspend", "close"} {
			t.Run(mode+"/"+end, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				const id = "sbx-daemon"
				f, l, pool, ep := provisioned(ctx, t, mode, id)
				probe, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					t.Fatal(err)
				}
				addr := probe.Addr().String()
				probe.Close()
				pidFile := filepath.Join(t.TempDir(), "daemon.pid")
				t.Cleanup(func() { // the daemon must not outlive a failed test
					if b, err := os.ReadFile(pidFile); err == nil {
						if pid, err := strconv.Atoi(string(b)); err == nil {
							_ = syscall.Kill(pid, syscall.SIGKILL)
						}
					}
				})
				start := fmt.Sprintf("(SBX_TEST_DAEMON_LISTEN=%s SBX_TEST_DAEMON_PIDFILE=%s setsid %s </dev/null >/dev/null 2>&1 &)", addr, pidFile, self)
				if res, err := pool.Exec(ctx, f.target(id, ep), podssh.ExecRequest{Command: start}); err != nil || res.ExitCode != 0 {
					t.Fatalf("start the daemon: %+v %v", res, err)
				}
				pool.Forget(id)
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
					if c, err := net.Dial("tcp", addr); err == nil {
						c.Close()
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the daemon never listened on %s", addr)
					}
				}

				switch end {
				case "destroy":
					err = l.Destroy(ctx, id)
				case "suspend":
					err = l.Suspend(ctx, id)
				case "close":
					err = l.Close()
				}
				if err != nil {
					t.Fatalf("%s: %v", end, err)
				}
				if c, err := net.Dial("tcp", addr); err == nil {
					c.Close()
					t.Fatalf("after %s the detached server still holds %s", end, addr)
				}
			})
		}
	}
}
