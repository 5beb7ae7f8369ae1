// Package sshdtest starts the machine's real OpenSSH sshd for tests, as a
// sandbox's server: it trusts a user CA and listens on a loopback port.
package sshdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/sandboxinit"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// Binary is the sshd the tests run.
const Binary = "/usr/sbin/sshd"

// Server is a running sshd.
type Server struct {
	// Addr is 127.0.0.1:port.
	Addr string
	// HostKey is its public host key in authorized_keys form, for pinning.
	HostKey string
	// User is the login that certificates must name; the tests run as
	// root, so it is "root".
	User string
	// HostSigner holds the host key, for a port forwarder (podtcp) that
	// stands in the same sandbox.
	HostSigner ssh.Signer
}

// Available reports whether sshd can be started here.
func Available() bool {
	_, err := os.Stat(Binary)
	return err == nil
}

// Start runs sshd trusting caPublicKey (authorized_keys form) and stops it
// in t.Cleanup. extraConfig lines go before the sandbox's config, so they
// may override it.
func Start(tb testing.TB, caPublicKey string, extraConfig ...string) *Server {
	tb.Helper()
	if !Available() {
		tb.Fatal("no " + Binary + "; install openssh-server (.ci/run does)")
	}
	dir := tb.TempDir()
	hostPEM, hostSigner, err := sshca.GenerateKey()
	if err != nil {
		tb.Fatal(err)
	}
	hostKeyPath := filepath.Join(dir, "host_key")
	caPath := filepath.Join(dir, "ca.pub")
	cfgPath := filepath.Join(dir, "sshd_config")
	write(tb, hostKeyPath, hostPEM, 0o600)
	write(tb, caPath, []byte(caPublicKey), 0o644)
	// sshd refuses to start without its privilege separation directory.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		tb.Fatal(err)
	}

	addr := "127.0.0.1:" + sshscenario.FreePort(tb)
	// The tests' own lines go first: sshd keeps the first value of a
	// keyword, so they win over the sandbox's config that follows, the
	// very one the local provider and the pod's init write.
	cfg := append([]string{
		// The parallel-session tests open many connections at once; the
		// sandbox's 256 would drop some of them before auth.
		"MaxStartups 500",
		"LogLevel VERBOSE",
		"AllowAgentForwarding yes",
		"AllowStreamLocalForwarding yes",
		// With SHLVL set, bash run by sshd for a command skips the
		// machine user's ~/.bashrc, which runs pyenv here: about a
		// CPU-second per login, a hundred of them in the parallel-session
		// tests, all of it load on the tests beside them. Login shells
		// (a pty session) still read ~/.profile as a user's would.
		"SetEnv SHLVL=1",
	}, extraConfig...)
	sandbox := sandboxinit.SSHDConfig{
		Listen: addr, HostKey: hostKeyPath, CAKeys: caPath, PidFile: filepath.Join(dir, "sshd.pid"),
	}
	write(tb, cfgPath, []byte(strings.Join(cfg, "\n")+"\n"+sandbox.String()), 0o644)

	// -e: sshd logs to stderr, which the test logs if it fails.
	sshscenario.Background(tb, exec.Command(Binary, "-D", "-e", "-f", cfgPath)).WaitTCP(tb, addr)
	return &Server{
		Addr:    addr,
		HostKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))),
		User:    "root",

		HostSigner: hostSigner,
	}
}

func write(tb testing.TB, path string, b []byte, mode os.FileMode) {
	tb.Helper()
	if err := os.WriteFile(path, b, mode); err != nil {
		tb.Fatal(err)
	}
}
