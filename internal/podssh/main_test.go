package podssh_test

import (
	"context"
	"log/slog"
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

var modes = testModes()

// sandbox is one provisioned sandbox plus a pool connected to it.
type sandbox struct {
	target podssh.Target
	pool   *podssh.Pool
	ca     *sshca.CA
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// newSandbox provisions a sandbox with the local provider in mode and
// returns its target and a pool; both are torn down at cleanup.
func newSandbox(t *testing.T, mode string) *sandbox {
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
	l, err := local.New(local.Config{DataDir: t.TempDir(), Mode: mode, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := "sb-" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "-")
	if len(id) > 60 {
		id = id[:60]
	}
	ep, err := l.Provision(ctx, provider.Spec{SandboxID: id, HostKeyPEM: hostPEM, UserCAKey: ca.AuthorizedKey()})
	if err != nil {
		t.Fatalf("provision %s sandbox: %v", mode, err)
	}
	pool := podssh.NewPool(ca, testLogger(t))
	t.Cleanup(func() { pool.Close() })
	return &sandbox{
		target: podssh.Target{
			SandboxID: id, Addr: ep.Addr, User: ep.User,
			HostKey: string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())), Workspace: ep.Workspace,
		},
		pool: pool,
		ca:   ca,
	}
}

// TestSandbox runs each area's checks once per server mode, against a
// sandbox of the area's own.
func TestSandbox(t *testing.T) {
	areas := []struct {
		name string
		fn   func(t *testing.T, ctx context.Context, sb *sandbox)
	}{
		{"Exec", testExec},
		{"ExecStreams", testExecStreams},
		{"Pool", testPool},
		{"Terminal", testTerminal},
	}
	for _, a := range areas {
		t.Run(a.name, func(t *testing.T) { perMode(t, a.fn) })
	}
}

// perMode runs fn once per server mode, sharing one sandbox per mode; ctx
// ends with the mode's subtest.
func perMode(t *testing.T, fn func(t *testing.T, ctx context.Context, sb *sandbox)) {
	for _, mode := range modes {
		t.Run(mode, func(t *testing.T) {
			fn(t, t.Context(), newSandbox(t, mode))
		})
	}
}

// testModes honours SBX_TEST_MODE=embedded|sshd to run a single mode.
func testModes() []string {
	if m := os.Getenv("SBX_TEST_MODE"); m != "" {
		return []string{m}
	}
	return []string{local.ModeEmbedded, local.ModeSSHD}
}
