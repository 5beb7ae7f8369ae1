package podfiles_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/internal/podssh"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestSandbox runs the file operations against a local sandbox of each
// server mode (SBX_TEST_MODE=embedded|sshd runs one): OpenSSH's
// sftp-server and pkg/sftp's disagree in places the operations cover.
func TestSandbox(t *testing.T) {
	modes := []string{local.ModeEmbedded, local.ModeSSHD}
	if m := os.Getenv("SBX_TEST_MODE"); m != "" {
		modes = []string{m}
	}
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			pool, target := newSandbox(t, mode)
			testFiles(t, t.Context(), pool, target)
		})
	}
}

// newSandbox provisions a sandbox with the local provider in mode and
// returns a pool and the sandbox's target; both go at cleanup.
func newSandbox(t *testing.T, mode string) (*podssh.Pool, podssh.Target) {
	t.Helper()
	if mode == local.ModeSSHD {
		if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
			t.Fatal("OpenSSH sshd not installed: install openssh-server (.ci/run does)")
		}
	}
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	hostPEM, hostSigner, err := sshca.GenerateKey()
	if err != nil {
		t.Fatal(err)
	}
	l, err := local.New(local.Config{DataDir: t.TempDir(), Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	id := "sb-files-" + strings.ToLower(mode)
	ep, err := l.Provision(ctx, provider.Spec{SandboxID: id, HostKeyPEM: hostPEM, UserCAKey: ca.AuthorizedKey()})
	if err != nil {
		t.Fatalf("provision %s sandbox: %v", mode, err)
	}
	pool := podssh.NewPool(ca, nil)
	t.Cleanup(func() { pool.Close() })
	return pool, podssh.Target{SandboxID: id, Addr: ep.Addr, User: ep.User,
		HostKey: string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())), Workspace: ep.Workspace}
}
