package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/internal/connlog"
)

// sshToken is a minted SSH credential, as the API's schema has it.
type sshToken = apiclient.SSHToken

// mintSSHToken mints a credential. A sandbox on its way into suspension
// (or back out) cannot be given one yet: it waits for that to finish,
// saying so, then mints; a suspended sandbox wakes on the connection.
func (a *app) mintSSHToken(ctx context.Context, cl *apiClient, id string, ttl int) (sshToken, error) {
	var body apiclient.SSHTokenRequest
	if ttl > 0 {
		body.TtlMinutes = &ttl
	}
	var tok sshToken
	for attempt := 0; ; attempt++ {
		err := decodeRaw(&tok)(apiclient.Raw(cl.gen.CreateSSHTokenWithResponse(ctx, id, body)))
		var pe *apiError
		if !errors.As(err, &pe) || pe.Code != "sandbox_state" || attempt >= 3 {
			return tok, err
		}
		sb, gerr := cl.sandbox(ctx, id)
		if gerr != nil || (sb.Status != "suspending" && sb.Status != "restoring") {
			return tok, err
		}
		fmt.Fprintf(a.errw, "sbx: sandbox %s is %s; waiting for that to finish before connecting...\n", id, sb.Status)
		wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		werr := followEvents(wctx, cl, id, 0, func(ev event) bool {
			return ev.State != nil && *ev.State != "suspending" && *ev.State != "restoring"
		})
		cancel()
		if werr != nil {
			return tok, fmt.Errorf("wait for sandbox %s: %w", id, werr)
		}
	}
}

// mintPinned mints a credential for sandbox id (see mintSSHToken) and pins
// the broker's host key: what every SSH command does before it connects
// or writes anything.
func (a *app) mintPinned(ctx context.Context, id string, ttl int) (sshToken, error) {
	cl, err := a.api()
	if err != nil {
		return sshToken{}, err
	}
	tok, err := a.mintSSHToken(ctx, cl, id, ttl)
	if err != nil {
		return sshToken{}, err
	}
	if err := pinBrokerKey(ctx, tok.Host, tok.Port); err != nil {
		return sshToken{}, err
	}
	return tok, nil
}

// knownHostsFile is the one place sbx pins SSH brokers' host keys, for
// every stack: entries are keyed by the broker's host:port, so each stack
// has its own pin.
func knownHostsFile() string { return filepath.Join(configDir(), "known_hosts") }

// hostKeyChangedError is a broker presenting another key than the pinned
// one: a fresh sbx dev data dir, or someone else on that address.
type hostKeyChangedError struct{ addr, file string }

func (e *hostKeyChangedError) Error() string {
	return fmt.Sprintf("the SSH broker at %s presents a different host key than the one pinned in %s. "+
		"If you just started sbx dev with a fresh data dir (a new stack has a new key), forget the old key: "+
		"ssh-keygen -R '%s' -f %s. Otherwise do not connect: something else may be answering there.",
		e.addr, e.file, knownhosts.Normalize(e.addr), e.file)
}

// errKeyChecked ends the probe handshake once the key was seen: the probe
// never authenticates.
var errKeyChecked = errors.New("host key checked")

// pinBrokerKey checks the broker's host key against the pinned one before
// OpenSSH connects, so OpenSSH can run with StrictHostKeyChecking=yes: the
// first connection to a stack pins its key, a changed key is refused with
// what to do.
func pinBrokerKey(ctx context.Context, host string, port int) error {
	kh := knownHostsFile()
	if err := os.MkdirAll(filepath.Dir(kh), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(kh), err)
	}
	f, err := os.OpenFile(kh, os.O_CREATE|os.O_RDONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", kh, err)
	}
	f.Close()
	check, err := knownhosts.New(kh)
	if err != nil {
		return fmt.Errorf("read %s: %w", kh, err)
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	var verdict error
	cfg := &ssh.ClientConfig{
		User: "sbx-host-key-check",
		HostKeyCallback: func(hostname string, remote net.Addr, key ssh.PublicKey) error {
			err := check(hostname, remote, key)
			var ke *knownhosts.KeyError
			switch {
			case err == nil:
			case errors.As(err, &ke) && len(ke.Want) == 0:
				line := knownhosts.Line([]string{knownhosts.Normalize(addr)}, key) + "\n"
				f, ferr := os.OpenFile(kh, os.O_APPEND|os.O_WRONLY, 0o600)
				if ferr != nil {
					verdict = fmt.Errorf("pin broker key: %w", ferr)
					break
				}
				_, ferr = f.WriteString(line)
				verdict = errors.Join(ferr, f.Close())
			case errors.As(err, &ke):
				verdict = &hostKeyChangedError{addr: addr, file: kh}
			default:
				verdict = err
			}
			return errKeyChecked
		},
		Timeout: 10 * time.Second,
	}
	d := net.Dialer{Timeout: 10 * time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("reach the SSH broker at %s: %w", addr, err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	_, _, _, err = ssh.NewClientConn(conn, addr, cfg)
	if err != nil && !errors.Is(err, errKeyChecked) && verdict == nil {
		return fmt.Errorf("check the SSH broker's host key at %s: %w", addr, err)
	}
	return verdict
}

// sshOptions are the arguments up to and including the destination.
func sshOptions(keyFile string, tok sshToken) []string {
	return []string{
		"-i", keyFile,
		// Only this key: an agent full of keys would burn the broker's
		// auth attempts before ours is offered.
		"-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + knownHostsFile(),
		// pinBrokerKey has pinned the key already; anything else is a
		// change that must not be accepted silently.
		"-o", "StrictHostKeyChecking=yes",
		// Names this client in the connection log (connlog.Rules).
		"-o", "SetEnv=" + connlog.EnvClient + "=" + connlog.ClientSbx,
		"-p", strconv.Itoa(tok.Port),
		tok.Username + "@" + tok.Host,
	}
}

type sshRunOptions struct{ ttl int }

// runSSH mints a credential, writes its key to a private temporary file,
// runs the system ssh with it and returns ssh's status as an exitStatus.
// extra goes to ssh after the destination (OpenSSH still reads options
// there, then the remote command).
func (a *app) runSSH(ctx context.Context, id string, o sshRunOptions, extra []string) error {
	sshPath, err := exec.LookPath("ssh")
	if err != nil {
		return fmt.Errorf("OpenSSH client (ssh) not found on PATH: %w", err)
	}
	tok, err := a.mintPinned(ctx, id, o.ttl)
	if err != nil {
		return err
	}
	keyDir, err := os.MkdirTemp("", "sbx-ssh-")
	if err != nil {
		return fmt.Errorf("create key dir: %w", err)
	}
	defer os.RemoveAll(keyDir)
	keyFile := filepath.Join(keyDir, "id_ed25519")
	if err := os.WriteFile(keyFile, []byte(tok.PrivateKeyPem), 0o600); err != nil {
		return fmt.Errorf("write key: %w", err)
	}
	cmd := exec.Command(sshPath, append(sshOptions(keyFile, tok), extra...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = a.in, a.out, a.errw
	// Not CommandContext: Ctrl-C belongs to the remote shell, which ssh
	// forwards; killing ssh on our own signal would cut the session.
	err = cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return &exitStatus{code: ee.ExitCode()}
	}
	if err != nil {
		return fmt.Errorf("run ssh: %w", err)
	}
	return nil
}

func newSSHCmd(a *app) *cobra.Command {
	var ttl int
	c := &cobra.Command{
		Use:   "ssh ID [SSH ARG...]",
		Short: "Open a shell (or run a command) over SSH with a fresh credential",
		Long: `Mint a credential, run the system ssh with it, and exit with ssh's status.
The key lives in a private temporary file for the session only.

Everything after the ID goes to ssh (options, then the remote command), so
sbx's own flags go before the ID: sbx ssh --ttl 5 $ID -L 3000:127.0.0.1:3000.
sbx's -o FORMAT after the ID is refused rather than handed to ssh (whose -o
takes Key=Value). The broker's host key is pinned per stack
in ~/.config/sbx/known_hosts on first use; a changed key is refused with what
to do (after a fresh sbx dev data dir: ssh-keygen -R as the message says).
A suspended sandbox wakes on the connection; ssh shows the broker's message.`,
		Example: `  sbx ssh $ID
  sbx ssh $ID 'make test'
  sbx ssh $ID -L 3000:127.0.0.1:3000 -N`,
		Args: func(c *cobra.Command, got []string) error {
			if len(got) == 0 {
				return usageErrorf(c, "missing ID")
			}
			return nil
		},
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			if ttl < 0 || ttl > 60 {
				return usageErrorf(c, "--ttl %d: want minutes from 1 to 60", ttl)
			}
			if err := sbxFlagAfterID(got[1:]); err != nil {
				return usageErrorf(c, "%v", err)
			}
			return a.runSSH(c.Context(), got[0], sshRunOptions{ttl: ttl}, got[1:])
		},
	}
	// ssh's own options follow the ID.
	c.Flags().SetInterspersed(false)
	c.Flags().IntVar(&ttl, "ttl", 0, "credential lifetime in minutes, 1 to 60 (default 60)")
	return c
}

// sbxFlagAfterID refuses sbx's -o FORMAT among ssh's arguments: ssh's -o
// takes Key=Value, so "-o json" there is sbx's flag in the wrong place,
// and ssh would fail on it with a message about its own config.
func sbxFlagAfterID(extra []string) error {
	for i, arg := range extra {
		if arg == "--" {
			return nil
		}
		v, ok := strings.CutPrefix(arg, "--output=")
		if !ok && (arg == "-o" || arg == "--output") && i+1 < len(extra) {
			v, ok = extra[i+1], true
		}
		if ok && (v == "json" || v == "table" || v == "id") {
			return fmt.Errorf("%q after the ID goes to ssh, whose -o wants Key=Value; sbx's flags go before the ID, and sbx ssh prints ssh's own output whatever -o says", arg+map[bool]string{true: " " + v}[arg == "-o" || arg == "--output"])
		}
	}
	return nil
}

// shareWindow is how long a key the ssh-config hook minted is handed to
// the next connections instead of a new one. OpenSSH reads the public key
// when it starts and the private key again when it signs: a second hook
// replacing the file in between (VS Code reconnecting several windows,
// terminals opened together) made the first connection fail with
// "private key ... contents do not match public".
const shareWindow = 30 * time.Second

// lockKeyFile takes an exclusive flock on FILE.lock, so hooks for one
// Host entry run one at a time and each sees the key the previous one
// wrote. The file stays; the kernel drops the lock if we die.
func lockKeyFile(keyFile string) (unlock func(), err error) {
	f, err := os.OpenFile(keyFile+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open key lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("lock %s: %w", keyFile, err)
	}
	return func() { f.Close() }, nil
}

// freshKey reports whether keyFile was written less than shareWindow ago.
func freshKey(keyFile string, now time.Time) bool {
	fi, err := os.Stat(keyFile)
	if err != nil || !fi.Mode().IsRegular() {
		return false
	}
	age := now.Sub(fi.ModTime())
	return age >= 0 && age < shareWindow
}

func newSSHKeyCmd(a *app) *cobra.Command {
	var ttl int
	var quiet, share bool
	c := &cobra.Command{
		Use:   "ssh-key ID FILE",
		Short: "Mint an SSH credential and save its private key to FILE",
		Long: `Mint an SSH credential for the sandbox, save its private key to FILE (mode
0600) and pin the broker's host key. Prints the ssh command that uses it.
sbx ssh-config runs this on every connection, so its host entry never goes stale.`,
		Example: `  sbx ssh-key $ID sbx.key
  ssh -i sbx.key -p 2222 $ID@127.0.0.1`,
		Args:              args([]string{"ID", "FILE"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			if ttl < 0 || ttl > 60 {
				return usageErrorf(c, "--ttl %d: want minutes from 1 to 60", ttl)
			}
			if share {
				unlock, err := lockKeyFile(got[1])
				if err != nil {
					return err
				}
				defer unlock()
				if freshKey(got[1], time.Now()) {
					return nil
				}
			}
			// Checked before minting: a key minted and then not written
			// is a credential nobody holds, and an event that says otherwise.
			if err := checkFolder(got[1]); err != nil {
				return err
			}
			tok, err := a.mintPinned(c.Context(), got[0], ttl)
			if err != nil {
				return err
			}
			if err := writeFileAtomic(got[1], []byte(tok.PrivateKeyPem), 0o600); err != nil {
				return err
			}
			command := fmt.Sprintf("ssh -i %s -o UserKnownHostsFile=%s -p %d %s@%s", shellQuote(got[1]), shellQuote(knownHostsFile()), tok.Port, tok.Username, tok.Host)
			switch {
			case quiet:
			case a.output == "json":
				// What a script needs to connect; the key itself is in FILE.
				return printJSON(a.out, map[string]any{"key_file": got[1], "known_hosts_file": knownHostsFile(),
					"username": tok.Username, "host": tok.Host, "port": tok.Port, "expires_at": tok.ExpiresAt, "ssh_command": command})
			default:
				fmt.Fprintln(a.out, command)
				fmt.Fprintf(a.errw, "key valid until %s\n", localTime(tok.ExpiresAt))
			}
			return nil
		},
	}
	c.Flags().IntVar(&ttl, "ttl", 0, "credential lifetime in minutes, 1 to 60 (default 60)")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print nothing")
	c.Flags().BoolVar(&share, "share", false, "keep FILE if it was written less than 30s ago (the ssh-config hook: connections opened together share one key)")
	return c
}

func newSSHConfigCmd(a *app) *cobra.Command {
	home, _ := os.UserHomeDir()
	dir := defaultSSHConfigDir()
	var prune bool
	userConfig := filepath.Join(home, ".ssh", "config")
	c := &cobra.Command{
		Use:   "ssh-config ID | --prune",
		Short: "Write a Host entry for VS Code / Cursor Remote-SSH and plain ssh",
		Long: `Write <dir>/<ID>.conf, a Host entry named after the sandbox, add
"Include <dir>/*.conf" to your ssh config once, and print the host alias.

The entry never goes stale: a Match exec line runs "sbx ssh-key" before every
connection, which mints a fresh credential (and waits while the sandbox is
suspending), so Remote-SSH reconnects hours later. Connections opened within
30 s of each other share one credential. A suspended sandbox wakes on
connect and ssh shows the broker's message while it does. The broker's host key
is pinned in ~/.config/sbx/known_hosts.

sbx destroy removes the sandbox's entry and key; --prune removes those of
sandboxes this API no longer has (ended or unknown) and prints their IDs.`,
		Example: `  sbx ssh-config --prune
  sbx ssh-config $ID       # then "Remote-SSH: Connect to Host..." -> sbx-...
  ssh $(sbx ssh-config $ID) uname -a`,
		Args: func(c *cobra.Command, got []string) error {
			if prune {
				return args(nil)(c, got)
			}
			return args([]string{"ID"})(c, got)
		},
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			if prune {
				pruned, _, err := a.pruneSSHEntries(c.Context(), dir)
				if err != nil {
					return err
				}
				if a.output == "json" {
					return printJSON(a.out, map[string]any{"pruned": append([]string{}, pruned...)})
				}
				for _, id := range pruned {
					fmt.Fprintln(a.out, id)
				}
				return nil
			}
			// One credential now checks the sandbox and pins the broker;
			// each connection mints its own.
			tok, err := a.mintPinned(c.Context(), got[0], 0)
			if err != nil {
				return err
			}
			alias, err := writeSSHConfig(dir, a.apiURL(), tok)
			if err != nil {
				return err
			}
			if userConfig != "" {
				if err := ensureInclude(userConfig, filepath.Join(dir, "*.conf")); err != nil {
					return err
				}
			}
			fmt.Fprintf(a.errw, "wrote %s (each connection mints a fresh credential)\n", filepath.Join(dir, alias+".conf"))
			if _, err := a.storedToken(); err != nil && os.Getenv("SBX_TOKEN") != "" {
				// The hook runs in whatever environment ssh has: an editor
				// started from a launcher has no SBX_TOKEN, and every
				// connection would fail there with "no API token".
				fmt.Fprintf(a.errw, "note: the entry's hook finds no token without SBX_TOKEN, which an editor started outside this shell does not have; save it for this API once: printenv SBX_TOKEN | sbx login --api %s\n", a.apiURL())
			}
			if a.output == "json" {
				return printJSON(a.out, map[string]string{"alias": alias, "file": filepath.Join(dir, alias+".conf")})
			}
			fmt.Fprintln(a.out, alias)
			return nil
		},
	}
	c.Flags().StringVar(&dir, "dir", dir, "where the Host entry and its key are written")
	c.Flags().BoolVar(&prune, "prune", false, "remove the entries of sandboxes that no longer exist, instead of writing one")
	c.Flags().StringVar(&userConfig, "ssh-config", userConfig, `ssh config that gets "Include <dir>/*.conf" if missing (empty: leave it alone)`)
	c.Flags().Lookup("dir").DefValue = tildePath(dir)
	c.Flags().Lookup("ssh-config").DefValue = tildePath(userConfig)
	return c
}

// selfPath is how the written config calls sbx again: this binary's path,
// unless it is a `go run` build that will be gone, then "sbx" on PATH.
func selfPath() string {
	p, err := os.Executable()
	if err != nil || strings.Contains(p, string(filepath.Separator)+"go-build") {
		return "sbx"
	}
	return p
}

// writeSSHConfig writes <dir>/<alias>.key and <dir>/<alias>.conf and
// returns the alias. Sandbox IDs already start with "sbx-", so the ID is
// the alias.
func writeSSHConfig(dir, apiURL string, tok sshToken) (string, error) {
	alias := tok.Username
	if !strings.HasPrefix(alias, "sbx-") {
		alias = "sbx-" + alias
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	keyFile := filepath.Join(dir, alias+".key")
	if err := writeFileAtomic(keyFile, []byte(tok.PrivateKeyPem), 0o600); err != nil {
		return "", err
	}
	// Match exec runs before OpenSSH reads the IdentityFile, and its
	// command line expands %-tokens, so a literal % is doubled. A failed
	// refresh leaves the Host entry in force with the old key, and the
	// broker then says the credential expired; our stderr says why.
	hook := strings.ReplaceAll(fmt.Sprintf("%s --api %s ssh-key --quiet --share %s %s",
		shellQuote(selfPath()), shellQuote(apiURL), shellQuote(tok.Username), shellQuote(keyFile)), "%", "%%")
	conf := fmt.Sprintf(`# Written by sbx ssh-config for sandbox %s on %s.
# Every connection mints a fresh credential first (the Match exec line);
# connections opened within 30 s of each other share one.
Match originalhost %s exec "%s"
Host %s
  HostName %s
  Port %d
  User %s
  IdentityFile "%s"
  IdentitiesOnly yes
  UserKnownHostsFile "%s"
  StrictHostKeyChecking yes
`, tok.Username, apiURL, alias, strings.ReplaceAll(hook, `"`, `\"`), alias, tok.Host, tok.Port, tok.Username, keyFile, knownHostsFile())
	if err := writeFileAtomic(filepath.Join(dir, alias+".conf"), []byte(conf), 0o600); err != nil {
		return "", err
	}
	return alias, nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	if err := checkFolder(path); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // no-op after the rename
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// checkFolder says, in words, when the folder path is to be written in
// is missing or is not a folder (the temporary file's error names a
// .tmp-* file the person never asked for).
func checkFolder(path string) error {
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("cannot write %s: the folder %s does not exist (create it, or name a file in an existing folder)", path, dir)
	case err != nil:
		return fmt.Errorf("cannot write %s: %w", path, err)
	case !fi.IsDir():
		return fmt.Errorf("cannot write %s: %s is not a folder", path, dir)
	}
	return nil
}

// ensureInclude puts "Include <pattern>" at the top of the ssh config
// unless it is there already. At the top because an Include after a Host
// line would only apply inside that Host block.
func ensureInclude(configPath, pattern string) error {
	line := fmt.Sprintf("Include %q", pattern)
	old, err := os.ReadFile(configPath)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", configPath, err)
	}
	for _, l := range strings.Split(string(old), "\n") {
		if strings.TrimSpace(l) == line {
			return nil
		}
	}
	if err := os.MkdirAll(filepath.Dir(configPath), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(configPath), err)
	}
	mode := os.FileMode(0o600)
	if st, err := os.Stat(configPath); err == nil {
		mode = st.Mode().Perm()
	}
	updated := "# Added by sbx ssh-config: Host entries for sandboxes.\n" + line + "\n\n" + string(old)
	return writeFileAtomic(configPath, []byte(updated), mode)
}
