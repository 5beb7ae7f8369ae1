package sshbroker

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sandboxHTTP is a server "inside the sandbox": bound to 127.0.0.1 on this
// machine, which is the sandbox in these tests.
func sandboxHTTP(t *testing.T, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

func curl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.CommandContext(testCtx(t, 30*time.Second), "curl", append([]string{"-sS", "--max-time", "20"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("curl %v: %v: %s", args, err, out)
	}
	return string(out)
}

func TestLocalForward(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	target := sandboxHTTP(t, "through -L")
	lport := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startBackground(t, e.ssh(ctx, k, "alpha", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-L", lport + ":" + target}))
	waitListening(t, "127.0.0.1:"+lport)
	if got := curl(t, "http://127.0.0.1:"+lport+"/"); got != "through -L" {
		t.Fatalf("GET through -L: got %q, want %q", got, "through -L")
	}
}

func TestDynamicForwardSOCKS(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	target := sandboxHTTP(t, "through -D")
	dport := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startBackground(t, e.ssh(ctx, k, "alpha", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-D", "127.0.0.1:" + dport}))
	waitListening(t, "127.0.0.1:"+dport)
	// --socks5-hostname resolves the name on the sandbox side, as VS Code does.
	_, port, _ := net.SplitHostPort(target)
	got := curl(t, "--socks5-hostname", "127.0.0.1:"+dport, "http://localhost:"+port+"/")
	if got != "through -D" {
		t.Fatalf("GET through -D: got %q, want %q", got, "through -D")
	}
}

func TestRemoteForward(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	clientSide := sandboxHTTP(t, "through -R") // a server on the client's machine
	rport := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startBackground(t, e.ssh(ctx, k, "alpha", []string{"-N", "-o", "ExitOnForwardFailure=yes", "-R", "127.0.0.1:" + rport + ":" + clientSide}))
	waitListening(t, "127.0.0.1:"+rport) // sshd listens "in the sandbox"
	if got := curl(t, "http://127.0.0.1:"+rport+"/"); got != "through -R" {
		t.Fatalf("GET through -R: got %q, want %q", got, "through -R")
	}
}

// TestVSCodePattern mimics Remote-SSH: `ssh -T -D port host bash` with a
// script on stdin that starts a server in the sandbox, then traffic to it
// through the SOCKS forward.
func TestVSCodePattern(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Fatal("python3 not installed: install python3 (.ci/run does)")
	}
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	webroot := t.TempDir()
	if err := os.WriteFile(filepath.Join(webroot, "index.html"), []byte("vscode-server-ok"), 0o644); err != nil {
		t.Fatal(err)
	}
	dport, sport := freePort(t), freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.ssh(ctx, k, "alpha", []string{"-T", "-D", "127.0.0.1:" + dport}, "bash")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startBackground(t, cmd)
	fmt.Fprintf(stdin, "cd %s\nexec 3>&1\npython3 -m http.server --bind 127.0.0.1 %s >/dev/null 2>&1 &\n"+
		"for i in $(seq 100); do (exec 4<>/dev/tcp/127.0.0.1/%s) 2>/dev/null && break; sleep 0.1; done\necho listening=%s\n",
		webroot, sport, sport, sport)
	line := make([]byte, 64)
	n, err := io.ReadAtLeast(stdout, line, len("listening="+sport))
	if err != nil || !strings.Contains(string(line[:n]), "listening="+sport) {
		t.Fatalf("script output: got %q (%v), want listening=%s", line[:n], err, sport)
	}
	waitListening(t, "127.0.0.1:"+dport)
	got := curl(t, "--socks5-hostname", "127.0.0.1:"+dport, "http://127.0.0.1:"+sport+"/index.html")
	if got != "vscode-server-ok" {
		t.Fatalf("GET via SOCKS: got %q, want vscode-server-ok", got)
	}
	io.WriteString(stdin, "kill %1; exit 0\n")
	stdin.Close()
}

func TestAgentForwarding(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	sock := filepath.Join(e.dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	startBackground(t, agent)
	waitUnixSocket(t, sock)
	agentKey := e.newKey("agent-key")
	addCmd := exec.Command("ssh-add", agentKey.path)
	addCmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := addCmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	t.Run("forwarded with -A", func(t *testing.T) {
		cmd := e.ssh(testCtx(t, 30*time.Second), k, "alpha", []string{"-A"}, "ssh-add -l")
		cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
		r := run(t, cmd, nil)
		if r.code != 0 || !strings.Contains(r.stdout, agentKey.fp) {
			t.Fatalf("ssh -A ssh-add -l: code %d stdout %q stderr %q, want the agent key %s", r.code, r.stdout, r.stderr, agentKey.fp)
		}
	})
	t.Run("absent without -A", func(t *testing.T) {
		cmd := e.ssh(testCtx(t, 30*time.Second), k, "alpha", []string{"-a"}, "ssh-add -l")
		cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
		r := run(t, cmd, nil)
		if r.code != 2 || strings.Contains(r.stdout, agentKey.fp) {
			t.Fatalf("ssh -a ssh-add -l: code %d stdout %q, want code 2 (no agent)", r.code, r.stdout)
		}
	})
}

func waitUnixSocket(t *testing.T, path string) {
	t.Helper()
	for range 200 {
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return
		}
		time.Sleep(25 * time.Millisecond)
	}
	t.Fatalf("no unix socket at %s", path)
}

// TestHeldForwardWithKeepalives holds `ssh -N` with ServerAliveInterval for
// over a minute, then uses its forward.
func TestHeldForwardWithKeepalives(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a connection for 65s")
	}
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	target := sandboxHTTP(t, "still here")
	lport := freePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.ssh(ctx, k, "alpha", []string{"-N", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2",
		"-o", "ExitOnForwardFailure=yes", "-L", lport + ":" + target})
	startBackground(t, cmd)
	waitListening(t, "127.0.0.1:"+lport)
	time.Sleep(65 * time.Second)
	if cmd.ProcessState != nil {
		t.Fatalf("ssh -N exited early: %v", cmd.ProcessState)
	}
	if got := curl(t, "http://127.0.0.1:"+lport+"/"); got != "still here" {
		t.Fatalf("GET after 65s: got %q, want %q", got, "still here")
	}
}
