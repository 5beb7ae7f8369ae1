package main

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// writeSecret writes the Secret's files the way kubelet updates a
// mounted Secret (a ..data symlink swap).
func writeSecret(t *testing.T, dir string, gen int, files map[string][]byte) {
	t.Helper()
	if err := inittest.WriteSecret(dir, gen, files); err != nil {
		t.Fatal(err)
	}
}

func waitHostKey(t *testing.T, addr string, want ssh.PublicKey) {
	t.Helper()
	var err error
	if waitfor.Try(t, 20*time.Second, func() bool { err = podssh.ProbeHostKey(t.Context(), addr, want); return err == nil }) {
		return
	}
	t.Fatalf("sshd at %s never presented the expected host key: %v", addr, err)
}

// TestPID1InPIDNamespace runs the real init as PID 1 of a new PID
// namespace (unshare), with a Secret directory that changes under it:
// the keys are installed and sshd serves them; the Secret's new host key
// is installed and sshd restarted; an orphan that exits is reaped, not
// left a zombie; a service runs and is reachable over the init's
// subsystem; SIGTERM to PID 1 ends every process, the service getting
// its SIGTERM first.
func TestPID1InPIDNamespace(t *testing.T) {
	for _, bin := range []string{"unshare", "/usr/sbin/sshd", "ps"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is required: %v", bin, err)
		}
	}
	dir := t.TempDir()
	initBin := filepath.Join(dir, "sbx-init")
	if out, err := exec.Command("go", "build", "-o", initBin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build sbx-init: %v\n%s", err, out)
	}
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	key1PEM, key1, _ := sshca.GenerateKey()
	key2PEM, key2, _ := sshca.GenerateKey()
	secret, run, home, ws := filepath.Join(dir, "secret"), filepath.Join(dir, "run"), filepath.Join(dir, "home"), filepath.Join(dir, "ws")
	for _, d := range []string{secret, home, ws} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeSecret(t, secret, 1, map[string][]byte{
		"host_key": key1PEM, "user_ca.pub": []byte(ca.AuthorizedKey()),
		"files.json": []byte(`[{"key":"grant","path":".sbx/grant-token","mode":384}]`), "grant": []byte("tok-1"),
	})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := "127.0.0.1:" + strconv.Itoa(port)
	ln, _ = net.Listen("tcp", "127.0.0.1:0")
	fwdPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	cmd := exec.Command("unshare", "--pid", "--fork", "--mount-proc", initBin,
		"--secret-dir", secret, "--run-dir", run, "--home", home, "--workspace", ws, "--port", strconv.Itoa(port),
		"--forward-port", strconv.Itoa(fwdPort), "--grace", "2s")
	var logBuf strings.Builder
	cmd.Stdout, cmd.Stderr = &logBuf, &logBuf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		select {
		case <-waited:
		case <-time.After(10 * time.Second):
		}
		if t.Failed() {
			t.Logf("init log:\n%s", logBuf.String())
		}
	})

	waitHostKey(t, addr, key1.PublicKey())
	if b, err := os.ReadFile(filepath.Join(home, ".sbx/grant-token")); err != nil || string(b) != "tok-1" {
		t.Errorf("files.json entry: %q %v", b, err)
	}
	pool := podssh.NewPool(ca, nil)
	defer pool.Close()
	target := podssh.Target{SandboxID: "sbx-pid1", Addr: addr, User: "root", HostKey: string(ssh.MarshalAuthorizedKey(key1.PublicKey()))}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	// The forwarder serves the same keys, for the user the init runs as
	// (root here), to a port on the sandbox's loopback.
	app, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	fwd := podssh.Target{SandboxID: "sbx-pid1", ForwardAddr: "127.0.0.1:" + strconv.Itoa(fwdPort), User: "root", HostKey: target.HostKey}
	fc, err := (&podtcp.Dialer{CA: ca}).Dial(ctx, fwd, app.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatalf("dial through the forwarder: %v", err)
	}
	fc.Close()

	// PID 1 is ours, and an orphan that exits is reaped: its pid leaves
	// the process table (a zombie would stay in it, state Z).
	res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: "cat /proc/1/cmdline | tr '\\0' ' '; echo; (sleep 0.2 >/dev/null 2>&1 & echo $!)"})
	lines := strings.Fields(string(res.Stdout))
	if err != nil || !strings.Contains(string(res.Stdout), "sbx-init") || len(lines) == 0 {
		t.Fatalf("PID 1 is %q (%v), want sbx-init", res.Stdout, err)
	}
	orphan := lines[len(lines)-1]
	var ps string
	waitfor.Cond(t, 10*time.Second, "PID 1 reaping orphan "+orphan, func() bool {
		res, err := pool.Exec(ctx, target, podssh.ExecRequest{Command: "ps -eo stat=,pid=,ppid=,comm="})
		if err != nil {
			t.Fatal(err)
		}
		ps = string(res.Stdout)
		return !hasPID(ps, orphan)
	})
	for _, l := range strings.Split(ps, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "Z") {
			t.Errorf("zombie left in the namespace: %q\n%s", l, ps)
		}
	}

	// A service through the init's subsystem (sshd runs "sbx-init ctl").
	c, err := pool.Client(ctx, target)
	if err != nil {
		t.Fatal(err)
	}
	term := filepath.Join(ws, "got-term")
	svc := initproto.Service{Name: "loop", Command: "trap 'echo term > " + term + "; exit 0' TERM; while true; do sleep 0.1; done"}
	if _, err := (initproto.Client{SSH: c}).Sync(ctx, []initproto.Service{svc}); err != nil {
		t.Fatalf("sync over the subsystem: %v", err)
	}
	var st []initproto.Status
	waitfor.Try(t, 10*time.Second, func() bool {
		st, err = (initproto.Client{SSH: c}).List(ctx)
		return err == nil && len(st) == 1 && st[0].State == initproto.StateRunning
	})
	if len(st) != 1 || st[0].State != initproto.StateRunning {
		t.Fatalf("service list %+v, %v", st, err)
	}

	// A warm claim: the Secret changes under the init.
	pool.Forget("sbx-pid1")
	writeSecret(t, secret, 2, map[string][]byte{
		"host_key": key2PEM, "user_ca.pub": []byte(ca.AuthorizedKey()),
		"files.json": []byte(`[{"key":"grant","path":".sbx/grant-token","mode":384}]`), "grant": []byte("tok-2"),
	})
	waitHostKey(t, addr, key2.PublicKey())
	if b, _ := os.ReadFile(filepath.Join(home, ".sbx/grant-token")); string(b) != "tok-2" {
		t.Errorf("grant file after the secret changed: %q", b)
	}
	target.HostKey = string(ssh.MarshalAuthorizedKey(key2.PublicKey()))
	// sshd re-reads its host key per connection, so the old sshd may show
	// the new key just before it ends: the new one may not listen yet.
	afterRestart := func() ([]initproto.Status, error) {
		c, err := pool.Client(ctx, target)
		if err != nil {
			return nil, err
		}
		return initproto.Client{SSH: c}.List(ctx)
	}
	waitfor.Try(t, 10*time.Second, func() bool { st, err = afterRestart(); return err == nil })
	if err != nil || len(st) != 1 || st[0].Starts != 1 {
		t.Errorf("after sshd's restart the service is %+v (%v), want the same run", st, err)
	}

	// SIGTERM to PID 1 (as the kubelet sends it): everything ends, the
	// service first asked to stop.
	pid1 := nsInit(t, cmd.Process.Pid)
	if err := syscall.Kill(pid1, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-waited:
	case <-time.After(20 * time.Second):
		t.Fatal("the namespace did not end within 20s of SIGTERM")
	}
	if b, err := os.ReadFile(term); err != nil || strings.TrimSpace(string(b)) != "term" {
		t.Errorf("the service was not asked to stop: %q %v", b, err)
	}
	if !strings.Contains(logBuf.String(), "secret changed: keys reinstalled; restarting sshd") {
		t.Errorf("init log does not record the reinstall:\n%s", logBuf.String())
	}
}

// nsInit is the host PID of the child unshare forked: the namespace's
// PID 1.
func nsInit(t *testing.T, unsharePID int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(unsharePID) + "/task/" + strconv.Itoa(unsharePID) + "/children")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	if len(f) != 1 {
		t.Fatalf("unshare's children: %q", b)
	}
	pid, _ := strconv.Atoi(f[0])
	return pid
}

// hasPID reports whether a "ps -eo stat=,pid=,..." listing has pid.
func hasPID(ps, pid string) bool {
	for _, l := range strings.Split(ps, "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == pid {
			return true
		}
	}
	return false
}
