package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/edge/sshbroker"
)

// sshConfig bounds every scenario; Validate keeps a typo from turning
// into an hour-long run.
type sshConfig struct {
	Server          string        // sandbox server: sshd or embedded
	BulkBytes       int64         // bytes per bulk run (split over the streams)
	Streams         int           // parallel streams in the second bulk run
	HandshakeFor    time.Duration // how long each handshake run lasts
	HandshakeConc   int           // concurrent handshakers
	Keystrokes      int           // keystrokes per RTT run
	KeystrokeRounds int           // rounds of the keystroke runs (direct, broker, relay)
	Sessions        int           // idle sessions held for the memory figure
	ClientCipher    string        // the load generator's cipher list, in order (OpenSSH's default)
	UpstreamCiphers string        // also measure the broker with this upstream cipher
	Only            string        // comma list of scenarios; empty means all
	Timeout         time.Duration // the whole run
}

func (c *sshConfig) Validate() error {
	var errs []error
	check := func(ok bool, msg string) {
		if !ok {
			errs = append(errs, errors.New(msg))
		}
	}
	check(c.Server == "sshd" || c.Server == "embedded", "--server must be sshd or embedded")
	check(c.BulkBytes >= 1<<20 && c.BulkBytes <= 16<<30, "--bulk-bytes must be 1 MiB..16 GiB")
	check(c.Streams >= 1 && c.Streams <= 64, "--streams must be 1..64")
	check(c.HandshakeFor > 0 && c.HandshakeFor <= time.Minute, "--handshake-for must be (0, 1m]")
	check(c.HandshakeConc >= 1 && c.HandshakeConc <= 64, "--handshake-conc must be 1..64")
	check(c.Keystrokes >= 1 && c.Keystrokes <= 10000, "--keystrokes must be 1..10000")
	check(c.KeystrokeRounds >= 1 && c.KeystrokeRounds <= 20, "--keystroke-rounds must be 1..20")
	check(c.Sessions >= 1 && c.Sessions <= 5000, "--sessions must be 1..5000")
	check(c.Timeout > 0 && c.Timeout <= time.Hour, "--timeout must be (0, 1h]")
	return errors.Join(errs...)
}

// openSSHCiphers is OpenSSH's client cipher list, in its order: the
// sandbox's sshd picks chacha20-poly1305 from it, the broker AES-GCM.
const openSSHCiphers = "chacha20-poly1305@openssh.com,aes128-ctr,aes192-ctr,aes256-ctr,aes128-gcm@openssh.com,aes256-gcm@openssh.com"

func runSSH(ctx context.Context, args []string) error {
	c := sshConfig{}
	fs := flag.NewFlagSet("ssh", flag.ContinueOnError)
	fs.StringVar(&c.Server, "server", "sshd", "sandbox SSH server: sshd (the machine's OpenSSH) or embedded")
	fs.Int64Var(&c.BulkBytes, "bulk-bytes", 1<<30, "bytes per bulk run")
	fs.IntVar(&c.Streams, "streams", 8, "parallel streams in the parallel bulk run")
	fs.DurationVar(&c.HandshakeFor, "handshake-for", 5*time.Second, "duration of each handshake run")
	fs.IntVar(&c.HandshakeConc, "handshake-conc", 4, "concurrent handshakers")
	fs.IntVar(&c.Keystrokes, "keystrokes", 300, "keystrokes per round-trip run")
	fs.IntVar(&c.KeystrokeRounds, "keystroke-rounds", 3, "rounds of keystroke runs, each timing direct, broker and TCP relay in a rotated order")
	fs.IntVar(&c.Sessions, "sessions", 1000, "idle sessions held for the memory figure")
	fs.StringVar(&c.ClientCipher, "client-cipher", openSSHCiphers, "comma list of ciphers the load generator offers, in order (default: OpenSSH's list)")
	fs.StringVar(&c.UpstreamCiphers, "compare-upstream-cipher", "chacha20-poly1305@openssh.com", "also run bulk through a broker using this upstream cipher (empty: skip)")
	fs.StringVar(&c.Only, "only", "", "comma list of scenarios: bulk,cpu,handshake,keystroke,memory,cipher")
	fs.DurationVar(&c.Timeout, "timeout", 20*time.Minute, "bound on the whole run")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	env, err := setupSSH(ctx, c)
	if err != nil {
		return err
	}
	defer env.close()
	rows, err := env.runAll(ctx)
	if err != nil {
		return err
	}
	report(os.Stdout, rows)
	return nil
}

// sshEnv is one sandbox (local provider), a broker in a child process in
// front of it, and the two ways in: direct and through the broker.
type sshEnv struct {
	cfg       sshConfig
	dir       string
	prov      *local.Local
	serverPID int // the sandbox sshd's listener; 0 for the embedded server
	direct    target
	broker    *brokerProc
	brokers   []*brokerProc
	caPEM     []byte
	routes    []childRoute
	brokerKey ssh.PublicKey
	clientKey ssh.Signer
	sandboxID string
}

// target is a way to reach the sandbox's shell.
type target struct {
	name string
	addr string
	cfg  *ssh.ClientConfig
}

func setupSSH(ctx context.Context, c sshConfig) (_ *sshEnv, err error) {
	if c.Server == "sshd" {
		if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
			return nil, errors.New("no /usr/sbin/sshd: install openssh-server")
		}
	}
	dir, err := os.MkdirTemp("", "sbx-loadtest-")
	if err != nil {
		return nil, err
	}
	e := &sshEnv{cfg: c, dir: dir, sandboxID: "sbx-loadtest"}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	ca, caPEM, err := sshca.Generate()
	if err != nil {
		return nil, err
	}
	e.caPEM = caPEM
	hostPEM, hostSigner, err := sshca.GenerateKey()
	if err != nil {
		return nil, err
	}
	// Sessions log in with the sandbox's home as HOME, so this machine's
	// ~/.bashrc (pyenv: about a CPU-second per session) is not measured.
	e.prov, err = local.New(local.Config{DataDir: filepath.Join(dir, "sandboxes"), Mode: c.Server,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ep, err := e.prov.Provision(ctx, provider.Spec{SandboxID: e.sandboxID, AccountID: "acct-load", Profile: "load",
		Platform: "linux", HostKeyPEM: hostPEM, UserCAKey: ca.AuthorizedKey()})
	if err != nil {
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	if c.Server == "sshd" {
		if e.serverPID, err = findProcess("sshd", filepath.Join(dir, "sandboxes")); err != nil {
			return nil, err
		}
	}
	cert, err := ca.UserSigner(ep.User, "loadtest", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	e.direct = target{name: "direct", addr: ep.Addr, cfg: e.clientConfig(ep.User, cert, hostSigner.PublicKey())}

	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	if e.clientKey, err = ssh.NewSignerFromKey(priv); err != nil {
		return nil, err
	}
	e.routes = []childRoute{{Username: e.sandboxID, Fingerprint: ssh.FingerprintSHA256(e.clientKey.PublicKey()), Route: sshbroker.Route{
		SandboxID: e.sandboxID, Addr: ep.Addr, User: ep.User,
		HostKey:   strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey()))),
		ExpiresAt: time.Now().Add(24 * time.Hour),
	}}}
	keys, err := sshbroker.LoadOrCreateHostKeys(filepath.Join(dir, "broker_keys"))
	if err != nil {
		return nil, err
	}
	e.brokerKey = keys[0].PublicKey()
	if e.broker, err = e.startBroker(""); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *sshEnv) clientConfig(user string, auth ssh.Signer, hostKey ssh.PublicKey) *ssh.ClientConfig {
	return &ssh.ClientConfig{
		Config:            ssh.Config{Ciphers: strings.Split(e.cfg.ClientCipher, ",")},
		User:              user,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(auth)},
		HostKeyCallback:   ssh.FixedHostKey(hostKey),
		HostKeyAlgorithms: []string{hostKey.Type()},
		Timeout:           20 * time.Second,
	}
}

// brokerProc is the broker under test, running as a child process.
type brokerProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	t     target
}

func (b *brokerProc) pid() int { return b.cmd.Process.Pid }

// startBroker runs `loadtest _ssh-broker` (this binary) with the routes
// and CA key written to its directory.
func (e *sshEnv) startBroker(upstreamCipher string) (*brokerProc, error) {
	if err := os.WriteFile(filepath.Join(e.dir, "ca_key"), e.caPEM, 0o600); err != nil {
		return nil, err
	}
	rb, _ := json.Marshal(e.routes)
	if err := os.WriteFile(filepath.Join(e.dir, "routes.json"), rb, 0o600); err != nil {
		return nil, err
	}
	cmd, stdin, addr, err := startChild("broker", brokerChildCmd, "--dir", e.dir, "--upstream-cipher", upstreamCipher)
	if err != nil {
		return nil, err
	}
	b := &brokerProc{cmd: cmd, stdin: stdin}
	e.brokers = append(e.brokers, b)
	name := "broker"
	if upstreamCipher != "" {
		name = "broker/" + strings.SplitN(upstreamCipher, "@", 2)[0]
	}
	b.t = target{name: name, addr: addr, cfg: e.clientConfig(e.sandboxID, e.clientKey, e.brokerKey)}
	return b, nil
}

func (e *sshEnv) close() {
	for _, b := range e.brokers {
		b.stdin.Close()
		_ = b.cmd.Wait()
	}
	if e.prov != nil {
		_ = e.prov.Destroy(context.Background(), e.sandboxID)
		_ = e.prov.Close()
	}
	os.RemoveAll(e.dir)
}
