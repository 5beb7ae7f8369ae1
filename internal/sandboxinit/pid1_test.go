package sandboxinit

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/podtcp/podtcptest"
	"github.com/sbxedge/sbx/internal/sandboxinit/inittest"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// freePort is a port free on 127.0.0.1 a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// podDirs is a pod's file system for RunInit, in a test's temporary
// directory: an empty Secret, the home and the workspace, and a
// stand-in for sshd (not under test) that runs until the init stops it;
// with the CA the Secrets written to it trust.
type podDirs struct {
	secret, run, home, ws, sshd string
	ca                          *sshca.CA
}

func newPodDirs(t *testing.T) podDirs {
	t.Helper()
	dir := t.TempDir()
	d := podDirs{secret: filepath.Join(dir, "secret"), run: filepath.Join(dir, "run"), home: filepath.Join(dir, "home"),
		ws: filepath.Join(dir, "ws"), sshd: filepath.Join(dir, "sshd")}
	var err error
	if d.ca, _, err = sshca.Generate(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(d.sshd, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{d.secret, d.home, d.ws} {
		if err := os.MkdirAll(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return d
}

// runInit runs RunInit on d, with the forwarder on forwardPort (0: none),
// until the test ends.
func (d podDirs) runInit(t *testing.T, forwardPort int) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- RunInit(ctx, InitConfig{
			SecretDir: d.secret, RunDir: d.run, HomeDir: d.home, Workspace: d.ws,
			ListenAddr: "127.0.0.1", SSHPort: freePort(t), ForwardPort: forwardPort, User: "sandbox", SSHD: d.sshd,
			Self: "/bin/false", WatchInterval: 20 * time.Millisecond,
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunInit: %v", err)
		}
	})
}

// TestForwarderFollowsInstalledKeys runs the init's forwarder as a warm
// pod has it: refusing everyone before a Secret is installed, then
// proving the installed host key and passing bytes to the app's port,
// then, after a claim replaces the Secret, proving only the new key.
func TestForwarderFollowsInstalledKeys(t *testing.T) {
	pod := newPodDirs(t)
	ca := pod.ca
	key1PEM, key1, _ := sshca.GenerateKey()
	key2PEM, key2, _ := sshca.GenerateKey()
	port := freePort(t)
	fwdAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	pod.runInit(t, port)
	ctx, secret := t.Context(), pod.secret

	app := podtcptest.EchoApp(t)
	d := &podtcp.Dialer{CA: ca, KeyID: "test-edge", Timeout: 5 * time.Second}
	target := func(key ssh.Signer) podssh.Target {
		return podssh.Target{SandboxID: "sbx-fwd", ForwardAddr: fwdAddr, User: "sandbox",
			HostKey: string(ssh.MarshalAuthorizedKey(key.PublicKey()))}
	}
	// dial waits for the forwarder to prove key, as a claim takes a
	// moment to be installed.
	dial := func(key ssh.Signer) net.Conn {
		t.Helper()
		var err error
		var c net.Conn
		if waitfor.Try(t, 10*time.Second, func() bool { c, err = d.Dial(ctx, target(key), app); return err == nil }) {
			return c
		}
		t.Fatalf("the forwarder never proved host key %s: %v", ssh.FingerprintSHA256(key.PublicKey()), err)
		return nil
	}
	exchange := func(c net.Conn, msg string) {
		t.Helper()
		defer c.Close()
		if err := podtcptest.Echo(c, msg); err != nil {
			t.Fatalf("through the forwarder: %v", err)
		}
	}

	// A warm pod: the forwarder listens and refuses everyone.
	waitfor.Cond(t, 10*time.Second, "the forwarder listening at "+fwdAddr, func() bool {
		c, err := net.Dial("tcp", fwdAddr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	if c, err := d.Dial(ctx, target(key1), app); err == nil {
		c.Close()
		t.Fatal("the forwarder served before any keys were installed")
	}

	files := func(key []byte) map[string][]byte {
		return map[string][]byte{"host_key": key, "user_ca.pub": []byte(ca.AuthorizedKey())}
	}
	if err := inittest.WriteSecret(secret, 1, files(key1PEM)); err != nil {
		t.Fatal(err)
	}
	exchange(dial(key1), "first sandbox")

	// The claim: another sandbox's keys.
	if err := inittest.WriteSecret(secret, 2, files(key2PEM)); err != nil {
		t.Fatal(err)
	}
	exchange(dial(key2), "second sandbox")
	if c, err := d.Dial(ctx, target(key1), app); !errors.Is(err, podtcp.ErrHostKey) {
		if c != nil {
			c.Close()
		}
		t.Errorf("dial pinning the first host key after the claim: %v; want ErrHostKey", err)
	}
}
