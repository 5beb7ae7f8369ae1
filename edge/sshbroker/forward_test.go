package sshbroker

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// to adapts a credential to the shared scenarios' SSH builder.
func (e *env) to(k key, user string) sshscenario.SSH {
	return func(ctx context.Context, opts []string, remote ...string) *exec.Cmd {
		return e.ssh(ctx, k, user, opts, remote...)
	}
}

// granted is a fresh broker with one sandbox, alpha, and the SSH builder
// of a key granted it: what the single-sandbox scenarios start from.
func granted(t *testing.T) sshscenario.SSH {
	e := newEnv(t, nil)
	return e.to(e.grant("alpha", nil), "alpha")
}

func TestLocalForward(t *testing.T) {
	sshscenario.LocalForward(t, granted(t))
}

func TestDynamicForwardSOCKS(t *testing.T) {
	sshscenario.DynamicForward(t, granted(t))
}

func TestRemoteForward(t *testing.T) {
	sshscenario.RemoteForward(t, granted(t))
}

// TestVSCodePattern mimics Remote-SSH (see sshscenario.VSCodePattern).
func TestVSCodePattern(t *testing.T) {
	sshscenario.VSCodePattern(t, granted(t))
}

func TestAgentForwarding(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	sock := filepath.Join(e.dir, "agent.sock")
	agent := exec.Command("ssh-agent", "-D", "-a", sock)
	sshscenario.Background(t, agent)
	waitUnixSocket(t, sock)
	agentKey := e.newKey("agent-key")
	addCmd := exec.Command("ssh-add", agentKey.path)
	addCmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := addCmd.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}
	t.Run("forwarded with -A", func(t *testing.T) {
		cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", []string{"-A"}, "ssh-add -l")
		cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
		r := run(t, cmd, nil)
		if r.code != 0 || !strings.Contains(r.stdout, agentKey.fp) {
			t.Fatalf("ssh -A ssh-add -l: code %d stdout %q stderr %q, want the agent key %s", r.code, r.stdout, r.stderr, agentKey.fp)
		}
	})
	t.Run("absent without -A", func(t *testing.T) {
		cmd := e.ssh(testCtx(t, sshCeiling), k, "alpha", []string{"-a"}, "ssh-add -l")
		cmd.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
		r := run(t, cmd, nil)
		if r.code != 2 || strings.Contains(r.stdout, agentKey.fp) {
			t.Fatalf("ssh -a ssh-add -l: code %d stdout %q, want code 2 (no agent)", r.code, r.stdout)
		}
	})
}

func waitUnixSocket(t *testing.T, path string) {
	t.Helper()
	waitfor.Cond(t, 5*time.Second, "a unix socket accepting at "+path, func() bool {
		c, err := net.Dial("unix", path)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// TestHeldForwardWithKeepalives holds `ssh -N` with ServerAliveInterval for
// over a minute, then uses its forward.
func TestHeldForwardWithKeepalives(t *testing.T) {
	if testing.Short() {
		t.Skip("holds a connection for 65s")
	}
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	target := sshscenario.LoopbackHTTP(t, "still here")
	lport := sshscenario.FreePort(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := e.ssh(ctx, k, "alpha", []string{"-N", "-o", "ServerAliveInterval=5", "-o", "ServerAliveCountMax=2",
		"-o", "ExitOnForwardFailure=yes", "-L", lport + ":" + target})
	sshscenario.Background(t, cmd)
	sshscenario.WaitTCP(t, "127.0.0.1:"+lport)
	time.Sleep(65 * time.Second)
	if cmd.ProcessState != nil {
		t.Fatalf("ssh -N exited early: %v", cmd.ProcessState)
	}
	if got := sshscenario.Curl(t, "http://127.0.0.1:"+lport+"/"); got != "still here" {
		t.Fatalf("GET after 65s: got %q, want %q", got, "still here")
	}
}

// TestMultiplexedCommands runs commands over one OpenSSH ControlMaster
// connection: the broker used to pass EOF on before the sandbox's
// exit-status, the client answered with a close, x/crypto/ssh closed the
// channel at once, and the command ended with 255 and no exit status.
func TestMultiplexedCommands(t *testing.T) {
	sshscenario.Multiplexed(t, granted(t), 150)
}
