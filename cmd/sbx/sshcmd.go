package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

type sshToken struct {
	Username      string    `json:"username"`
	Host          string    `json:"host"`
	Port          int       `json:"port"`
	PrivateKeyPEM string    `json:"private_key_pem"`
	ExpiresAt     time.Time `json:"expires_at"`
	SSHCommand    string    `json:"ssh_command"`
}

func mintSSHToken(ctx context.Context, c *apiClient, id string, ttl int) (sshToken, error) {
	body := map[string]int{}
	if ttl > 0 {
		body["ttl_minutes"] = ttl
	}
	var tok sshToken
	err := c.json(ctx, http.MethodPost, "/api/v1/sandboxes/"+url.PathEscape(id)+"/ssh_tokens", body, &tok)
	return tok, err
}

// knownHostsFile is where `sbx ssh` keeps the broker's host key. It is
// our own file, not ~/.ssh/known_hosts, and lives in the sbx data dir, so
// wiping a dev stack (which makes a new broker key) also forgets the old
// key instead of tripping OpenSSH's "host identification changed" alarm.
func knownHostsFile() string { return filepath.Join(defaultDataDir(), "known_hosts") }

// runSSH mints a credential, writes its key to a private temporary file,
// runs the system ssh with it and exits with ssh's status. Arguments after
// the ID go to ssh after the destination (OpenSSH still reads options
// there, then the remote command).
func runSSH(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sbx ssh", flag.ContinueOnError)
	c, finish := newClient(fs)
	ttl := fs.Int("ttl", 0, "credential lifetime in minutes, 1 to 60 (default 60)")
	if err := parse(fs, args, finish); err != nil {
		return err
	}
	id, err := arg(fs, 0, "ID")
	if err != nil {
		return errors.New("usage: sbx ssh [--ttl M] ID [ssh args...]")
	}
	sshPath, err := exec.LookPath("ssh")
	if err != nil {
		return fmt.Errorf("OpenSSH client not found: %w", err)
	}
	tok, err := mintSSHToken(ctx, c, id, *ttl)
	if err != nil {
		return err
	}
	keyDir, err := os.MkdirTemp("", "sbx-ssh-")
	if err != nil {
		return fmt.Errorf("create key dir: %w", err)
	}
	// Removed below, not deferred: os.Exit skips defers.
	cleanup := func() { os.RemoveAll(keyDir) }
	keyFile := filepath.Join(keyDir, "id_ed25519")
	if err := os.WriteFile(keyFile, []byte(tok.PrivateKeyPEM), 0o600); err != nil {
		cleanup()
		return fmt.Errorf("write key: %w", err)
	}
	kh := knownHostsFile()
	if err := os.MkdirAll(filepath.Dir(kh), 0o700); err != nil {
		cleanup()
		return fmt.Errorf("create %s: %w", filepath.Dir(kh), err)
	}
	argv := append(sshOptions(keyFile, kh, tok), fs.Args()[1:]...)
	cmd := exec.Command(sshPath, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Not CommandContext: Ctrl-C belongs to the remote shell, which ssh
	// forwards; killing ssh on our own signal would cut the session.
	err = cmd.Run()
	cleanup()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("run ssh: %w", err)
	}
	return nil
}

// sshOptions are the arguments up to and including the destination.
func sshOptions(keyFile, knownHosts string, tok sshToken) []string {
	return []string{
		"-i", keyFile,
		// Only this key: an agent full of keys would burn the broker's
		// auth attempts before ours is offered.
		"-o", "IdentitiesOnly=yes",
		"-o", "UserKnownHostsFile=" + knownHosts,
		// Trust on first use, then pinned: the API cannot hand us the
		// broker's key yet (see the README's SSH section).
		"-o", "StrictHostKeyChecking=accept-new",
		"-p", strconv.Itoa(tok.Port),
		tok.Username + "@" + tok.Host,
	}
}

// runSSHConfig writes a Host entry and its key for editors' Remote-SSH.
func runSSHConfig(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sbx ssh-config", flag.ContinueOnError)
	c, finish := newClient(fs)
	home, _ := os.UserHomeDir()
	defDir := filepath.Join(home, ".ssh", "sbx")
	dir := fs.String("dir", defDir, "where the Host entry, key and known_hosts are written")
	sshConfig := fs.String("ssh-config", filepath.Join(home, ".ssh", "config"),
		`ssh config that gets "Include <dir>/*.conf" if missing (empty: leave it alone)`)
	ttl := fs.Int("ttl", 0, "credential lifetime in minutes, 1 to 60 (default 60)")
	if err := parse(fs, args, finish); err != nil {
		return err
	}
	id, err := arg(fs, 0, "ID")
	if err != nil {
		return errors.New("usage: sbx ssh-config [--dir D] [--ssh-config F] ID")
	}
	tok, err := mintSSHToken(ctx, c, id, *ttl)
	if err != nil {
		return err
	}
	alias, err := writeSSHConfig(*dir, tok)
	if err != nil {
		return err
	}
	if *sshConfig != "" {
		if err := ensureInclude(*sshConfig, filepath.Join(*dir, "*.conf")); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "wrote %s (credential valid until %s; run again for a new one)\n",
		filepath.Join(*dir, alias+".conf"), tok.ExpiresAt.Local().Format(time.DateTime))
	fmt.Println(alias)
	return nil
}

// writeSSHConfig writes <dir>/<alias>.key and <dir>/<alias>.conf and
// returns the alias. Sandbox IDs already start with "sbx-", so the ID is
// the alias.
func writeSSHConfig(dir string, tok sshToken) (string, error) {
	alias := tok.Username
	if !strings.HasPrefix(alias, "sbx-") {
		alias = "sbx-" + alias
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("create %s: %w", dir, err)
	}
	keyFile := filepath.Join(dir, alias+".key")
	// Write to a temp name and rename, so a Remote-SSH session reading
	// the old key never sees half a file.
	if err := writeFileAtomic(keyFile, []byte(tok.PrivateKeyPEM), 0o600); err != nil {
		return "", err
	}
	conf := fmt.Sprintf(`# Written by sbx ssh-config; the key expires %s.
Host %s
  HostName %s
  Port %d
  User %s
  IdentityFile "%s"
  IdentitiesOnly yes
  UserKnownHostsFile "%s"
  StrictHostKeyChecking accept-new
`, tok.ExpiresAt.UTC().Format(time.RFC3339), alias, tok.Host, tok.Port, tok.Username,
		keyFile, filepath.Join(dir, "known_hosts"))
	if err := writeFileAtomic(filepath.Join(dir, alias+".conf"), []byte(conf), 0o600); err != nil {
		return "", err
	}
	return alias, nil
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
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
