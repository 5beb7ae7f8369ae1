package tart

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/sshdconfig"
)

// sbxDir is the provider's directory in the guest user's home: the host
// key, the CA, the sshd_config and its pid file.
const sbxDir = ".sbx"

// boot waits for the guest's IP, installs the sandbox's keys, files and
// sshd_config through `tart exec`, (re)starts the guest's sshd on the
// VM's IP and waits until it answers with the sandbox's host key.
func (p *Provider) boot(ctx context.Context, h *host, spec provider.Spec) (provider.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, p.cfg.BootTimeout)
	defer cancel()
	name := vmName(spec.SandboxID)
	ip, err := p.waitIP(ctx, h, name)
	if err != nil {
		return provider.Endpoint{}, err
	}
	signer, err := gossh.ParsePrivateKey(spec.HostKeyPEM)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("parse host key: %w", err)
	}
	if _, _, _, _, err := gossh.ParseAuthorizedKey([]byte(spec.UserCAKey)); err != nil {
		return provider.Endpoint{}, fmt.Errorf("parse user CA key: %w", err)
	}
	who, err := guestExec(ctx, h.driver, name, nil, "/bin/sh", "-c", `printf '%s\n%s\n' "$HOME" "$(id -un)"`)
	if err != nil {
		return provider.Endpoint{}, err
	}
	lines := strings.Split(strings.TrimSpace(who), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "/") || lines[1] == "" {
		return provider.Endpoint{}, fmt.Errorf("guest of %s: unexpected home and user %q", name, who)
	}
	home, user := lines[0], lines[1]
	dir := home + "/" + sbxDir
	for _, kv := range spec.Env {
		if strings.ContainsAny(kv, "\x00\n\r") || !strings.Contains(kv, "=") {
			return provider.Endpoint{}, fmt.Errorf("spec env %q: want NAME=value on one line", strings.SplitN(kv, "=", 2)[0])
		}
	}
	conf := sshdconfig.Config{
		Listen: ip, Port: p.cfg.GuestSSHPort, HostKey: dir + "/host_key", CAKeys: dir + "/ca.pub",
		PidFile: dir + "/sshd.pid", SetEnv: append(append([]string{}, spec.Env...), "HOME="+home),
	}
	files := []provider.File{
		{Path: sbxDir + "/host_key", Mode: 0o600, Data: spec.HostKeyPEM},
		{Path: sbxDir + "/ca.pub", Mode: 0o644, Data: []byte(spec.UserCAKey)},
		{Path: sbxDir + "/sshd_config", Mode: 0o600, Data: []byte(conf.String())},
	}
	for _, f := range spec.Files {
		if !validRel(f.Path) {
			return provider.Endpoint{}, fmt.Errorf("spec file %q: path must stay inside the home dir", f.Path)
		}
		files = append(files, f)
	}
	for _, f := range files {
		if err := writeGuestFile(ctx, h.driver, name, f); err != nil {
			return provider.Endpoint{}, err
		}
	}
	if _, err := guestExec(ctx, h.driver, name, nil, "/bin/sh", "-c", startSSHD, "sh", dir); err != nil {
		return provider.Endpoint{}, fmt.Errorf("start the guest's sshd: %w", err)
	}
	addr := net.JoinHostPort(ip, strconv.Itoa(p.cfg.GuestSSHPort))
	if err := waitSSH(ctx, addr, signer.PublicKey()); err != nil {
		out, _ := guestExec(context.WithoutCancel(ctx), h.driver, name, nil, "/bin/sh", "-c", `tail -5 "$1/sshd.log" 2>/dev/null`, "sh", dir)
		return provider.Endpoint{}, fmt.Errorf("%w; sshd said: %s", err, strings.TrimSpace(out))
	}
	// The workspace is the guest user's home: where an OpenSSH login
	// lands, so exec, files and `ssh` agree on relative paths.
	return provider.Endpoint{Addr: addr, User: user, Workspace: home, Boot: "cold_boot"}, nil
}

// startSSHD ends the sandbox's previous sshd (a resumed guest still runs
// it, with an older key) and starts sshd, which
// backgrounds itself. The old pid is checked to be an sshd first.
const startSSHD = `set -e
D="$1"
if [ -f "$D/sshd.pid" ]; then
  pid="$(cat "$D/sshd.pid")"
  if ps -p "$pid" -o command= 2>/dev/null | grep -q "sshd"; then kill "$pid" 2>/dev/null || true; sleep 0.2; fi
  rm -f "$D/sshd.pid"
fi
[ -d /run/sshd ] || mkdir -p /run/sshd 2>/dev/null || true
/usr/sbin/sshd -f "$D/sshd_config" -E "$D/sshd.log"
`

// validRel keeps a spec file inside the guest's home.
func validRel(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.ContainsAny(p, "\x00\n") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// writeGuestFile writes f under the guest user's home through tart exec.
func writeGuestFile(ctx context.Context, d Driver, vm string, f provider.File) error {
	mode := f.Mode & 0o777
	if mode == 0 {
		mode = 0o600
	}
	const script = `umask 077; f="$HOME/$1"; mkdir -p "$(dirname "$f")" && cat > "$f.tmp" && chmod "$2" "$f.tmp" && mv "$f.tmp" "$f"`
	if _, err := guestExec(ctx, d, vm, f.Data, "/bin/sh", "-c", script, "sh", f.Path, strconv.FormatUint(uint64(mode), 8)); err != nil {
		return fmt.Errorf("write %s in the guest: %w", f.Path, err)
	}
	return nil
}

// guestExec runs argv in the guest and returns its stdout; a non-zero
// exit is an error carrying its stderr.
func guestExec(ctx context.Context, d Driver, vm string, stdin []byte, argv ...string) (string, error) {
	res, err := d.Exec(ctx, vm, stdin, argv...)
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return string(res.Stdout), fmt.Errorf("tart exec in %s: exit %d: %s", vm, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return string(res.Stdout), nil
}

// waitIP asks tart for the guest's address until it has one, the run
// ends (at the licence limit, say) or ctx ends.
func (p *Provider) waitIP(ctx context.Context, h *host, name string) (string, error) {
	ended := make(chan Exit, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		if e, err := h.driver.Wait(wctx, name); err == nil {
			ended <- e
		}
	}()
	for {
		ip, err := h.driver.IP(ctx, name, 2*time.Second)
		if err == nil {
			return ip, nil
		}
		if !errors.Is(err, ErrNoIP) {
			return "", fmt.Errorf("tart ip %s: %w", name, err)
		}
		select {
		case e := <-ended:
			if LimitExit(e) {
				return "", fmt.Errorf("tart run %s: %w (%s)", name, ErrLimit, strings.TrimSpace(e.Stderr))
			}
			return "", fmt.Errorf("tart run %s ended while booting: exit %d: %s", name, e.Code, strings.TrimSpace(e.Stderr))
		case <-ctx.Done():
			return "", fmt.Errorf("VM %s has no IP address: %w", name, ctx.Err())
		default:
		}
	}
}

// waitSSH returns once addr presents want in an SSH key exchange.
func waitSSH(ctx context.Context, addr string, want gossh.PublicKey) error {
	var last error
	for {
		if last = podssh.ProbeHostKey(ctx, addr, want); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("guest sshd on %s not ready: %w (last probe: %v)", addr, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
