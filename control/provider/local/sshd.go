package local

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

type sshdOptions struct {
	path    string // absolute path of sshd
	dir     string // sandbox dir
	port    int    // preferred
	hostKey gossh.PublicKey
	logger  *slog.Logger
	setEnv  []string            // NAME=value for every session
	env     []string            // the spec's Env: every session and service
	svcs    []initproto.Service // the spec's Services, started with the init
	user    string              // the login name, services' USER
	// initCmd is what sshd runs, followed by "ctl --socket S", for the
	// sbx-init subsystem; nil runs no init (and so no services).
	initCmd []string
}

// sshdServer is an OpenSSH sshd run in the foreground for one sandbox,
// owned by the provider. It is started in its own process group so stop
// reaches the per-connection children too. User sessions call setsid and
// leave that group; they end when their connection process dies.
type sshdServer struct {
	cmd    *exec.Cmd
	done   chan struct{} // closed when the process has been reaped
	stderr *logWriter
	// init runs the sandbox's services, as in embedded mode; nil without
	// an sbx-init binary. stop ends it after sshd.
	init *socketInit
}

// sshdAttempts bounds retries when the chosen port is taken between our
// probe and sshd's bind.
const sshdAttempts = 3

func startSSHD(ctx context.Context, o sshdOptions) (*sshdServer, int, error) {
	// Privilege separation directory; Debian creates it at boot via tmpfiles,
	// containers usually lack it.
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		return nil, 0, fmt.Errorf("create /run/sshd: %w", err)
	}
	var init *socketInit
	if len(o.initCmd) > 0 {
		var err error
		if init, err = startSocketInit(o.dir, o.user, o.env, o.svcs, o.logger); err != nil {
			return nil, 0, err
		}
	}
	var lastErr error
	port := o.port
	for attempt := 0; attempt < sshdAttempts; attempt++ {
		p, err := freePort(port)
		if err != nil {
			lastErr = err
			break
		}
		s, err := runSSHD(ctx, o, p, init)
		if err == nil {
			return s, p, nil
		}
		lastErr = err
		port = 0 // the preferred port did not work: any port
	}
	if init != nil {
		init.close()
	}
	return nil, 0, lastErr
}

func runSSHD(ctx context.Context, o sshdOptions, port int, init *socketInit) (*sshdServer, error) {
	cfgPath := filepath.Join(o.dir, "sshd_config")
	conf := sshdConfig(o.dir, port, append(slices.Clone(o.setEnv), o.env...))
	if init != nil {
		conf.InitCommand = initCommand(o.initCmd, init.path)
	}
	if err := writeFileAtomic(cfgPath, []byte(conf.String()), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(o.path, "-D", "-e", "-f", cfgPath)
	// Pdeathsig: if the provider process dies without Close, sshd must not
	// linger holding the port.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	// sshd and its connection processes carry the marker; sessions get it
	// from SetEnv (sshdConfig).
	cmd.Env = append(os.Environ(), marker(o.dir))
	lw := &logWriter{logger: o.logger}
	cmd.Stdout, cmd.Stderr = lw, lw
	// A process a user started in the sandbox and detached (setsid, as dev
	// servers are) can inherit sshd's log pipe and outlive sshd; Wait must
	// not wait for it, or suspend and destroy hang for as long as it runs.
	cmd.WaitDelay = time.Second
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sshd: %w", err)
	}
	s := &sshdServer{cmd: cmd, done: make(chan struct{}), stderr: lw, init: init}
	go func() {
		defer close(s.done)
		err := cmd.Wait()
		lw.flush()
		o.logger.Debug("sshd exited", "err", err)
	}()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitReady(ctx, addr, o.hostKey, s.done); err != nil {
		s.stopSSHD() // startSSHD may retry with the same init
		return nil, fmt.Errorf("%w; sshd said: %s", err, lw.tail())
	}
	return s, nil
}

// sshdConfig listens only on loopback; see sandboxinit.SSHDConfig.
// Every session carries the sandbox's marker, so Destroy and Suspend
// find what it started (endTree), and the sandbox's home as HOME, as
// embedded sessions and the services have: that is where Spec.Files (the
// grant token) land, and the machine user's own dotfiles stay out of the
// sandbox (here, a ~/.bashrc whose pyenv rehash waits a minute for a lock
// a killed shell left). setEnv comes first, since sshd keeps the first
// of a repeated name: a configured HOME wins (Validate keeps each pair
// to NAME=word and away from the marker's name).
func sshdConfig(dir string, port int, setEnv []string) sandboxinit.SSHDConfig {
	return sandboxinit.SSHDConfig{
		Listen: "127.0.0.1", Port: port, HostKey: filepath.Join(dir, "host_key"),
		CAKeys: filepath.Join(dir, "ca.pub"), PidFile: filepath.Join(dir, "sshd.pid"),
		SetEnv: append(slices.Clone(setEnv), marker(dir), "HOME="+filepath.Join(dir, "home")),
	}
}

func (s *sshdServer) exited() <-chan struct{} { return s.done }

// servicesStarted is false without an init: the spec's Services, if
// any, cannot run, and control's push says so.
func (s *sshdServer) servicesStarted() bool { return s.init != nil && s.init.booted }

// stop terminates sshd and its connection processes, then the init and
// its services.
func (s *sshdServer) stop() {
	s.stopSSHD()
	if s.init != nil {
		s.init.close()
	}
}

// stopSSHD terminates sshd and its connection processes, escalating to
// KILL.
func (s *sshdServer) stopSSHD() {
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-s.done
	}
	// Connection processes outlive the listener on TERM; end them too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// freePort returns port if it can be bound on loopback now, else a fresh
// one. sshd binds it a moment later; startSSHD retries if we lose a race.
func freePort(port int) (int, error) {
	ln, err := listenLoopback(port)
	if err != nil {
		return 0, err
	}
	p := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("release probe port: %w", err)
	}
	return p, nil
}

// logWriter sends sshd's log lines to slog at debug and keeps the last few
// for error messages.
type logWriter struct {
	logger *slog.Logger

	mu      sync.Mutex // guards partial, recent
	partial []byte
	recent  []string
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *logWriter) line(l string) {
	l = strings.TrimRight(l, "\r")
	w.logger.Debug("sshd", "line", l)
	w.recent = append(w.recent, l)
	if len(w.recent) > 8 {
		w.recent = w.recent[1:]
	}
}

func (w *logWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.line(string(w.partial))
		w.partial = nil
	}
}

func (w *logWriter) tail() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.Join(w.recent, " | ")
}
