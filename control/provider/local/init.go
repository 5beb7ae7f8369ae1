package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// A local sandbox's services are run by the same sandboxinit.Supervisor
// as a pod's init, owned by the sandbox's server whichever mode it is:
// the embedded server serves the sbx-init subsystem in process; sshd
// runs "sbx-init ctl --socket S" for it (or the host program standing in
// for sbx-init, as "sbx sandbox-init ctl --socket S": InitFallback),
// which relays to the supervisor listening on a unix socket in the
// sandbox directory (socketInit).

// newInit returns the supervisor of the sandbox in dir, running svcs (the
// spec's Services): they start with the sandbox, as sbx-init's would,
// and booted says they all did (Endpoint.ServicesStarted), so control
// need not push them. One that cannot start is logged, not fatal: the
// sandbox is usable without it, and control's push (booted false)
// reports it.
func newInit(dir, user string, env []string, svcs []initproto.Service, logger *slog.Logger) (sup *sandboxinit.Supervisor, booted bool, err error) {
	sup, err = sandboxinit.New(sandboxinit.Config{
		Workspace: filepath.Join(dir, "workspace"), Env: baseEnv(dir, user, env),
		Logger: logger.With("component", "init"),
		// Beside the workspace, not in it: kept on disk while suspended.
		LogDir: filepath.Join(dir, "service-logs"),
		// The host runs other sandboxes and everything else: the
		// sandbox's processes are the ones carrying its marker.
		Procs: &sandboxinit.ProcScan{Belongs: func(env []byte) bool { return hasEnv(env, marker(dir)) }},
	})
	if err != nil {
		return nil, false, err
	}
	if len(svcs) == 0 {
		return sup, true, nil
	}
	if err := sup.Sync(svcs); err != nil {
		logger.Warn("start the declared services", "err", err)
		return sup, false, nil
	}
	return sup, true, nil
}

// baseEnv is what every process of the sandbox starts with, services
// included; it carries the marker that destroy and suspend find them by.
func baseEnv(dir, user string, extra []string) []string {
	return append(append([]string{
		"HOME=" + filepath.Join(dir, "home"),
		"USER=" + user,
		"LOGNAME=" + user,
		"SHELL=/bin/sh",
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"LANG=C.UTF-8",
	}, extra...), marker(dir))
}

// socketInit is a supervisor serving its control protocol on a unix
// socket, for sshd's sbx-init subsystem to relay to. close stops the
// serving, then the services.
type socketInit struct {
	sup    *sandboxinit.Supervisor
	booted bool // newInit's: the spec's Services all started
	path   string
	tmpDir string // holds the socket when dir's path is too long for one
	cancel context.CancelFunc
	done   chan struct{}
}

// maxSocketPath keeps under sun_path's 108 bytes (104 on the BSDs).
const maxSocketPath = 100

func startSocketInit(dir, user string, env []string, svcs []initproto.Service, logger *slog.Logger) (*socketInit, error) {
	sup, booted, err := newInit(dir, user, env, svcs, logger)
	if err != nil {
		return nil, err
	}
	si := &socketInit{sup: sup, booted: booted, path: filepath.Join(dir, "init.sock"), done: make(chan struct{})}
	if len(si.path) > maxSocketPath {
		if si.tmpDir, err = os.MkdirTemp("", "sbx-init-"); err != nil {
			return nil, fmt.Errorf("create init socket dir: %w", err)
		}
		si.path = filepath.Join(si.tmpDir, "init.sock")
	}
	_ = os.Remove(si.path) // left by a provider that died
	ln, err := net.Listen("unix", si.path)
	if err != nil {
		si.removeTmp()
		return nil, fmt.Errorf("listen for the init's control calls: %w", err)
	}
	// Only the sandbox's user (ours) may call the init.
	if err := os.Chmod(si.path, 0o600); err != nil {
		ln.Close()
		si.removeTmp()
		return nil, fmt.Errorf("chmod init socket: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	si.cancel = cancel
	go func() {
		defer close(si.done)
		if err := sup.ServeListener(ctx, ln); err != nil {
			logger.Warn("init control socket", "err", err)
		}
	}()
	return si, nil
}

func (si *socketInit) removeTmp() {
	if si.tmpDir != "" {
		_ = os.RemoveAll(si.tmpDir)
	}
}

func (si *socketInit) close() {
	si.cancel()
	<-si.done
	si.sup.Close()
	_ = os.Remove(si.path)
	si.removeTmp()
}

// initCommand is sshd's Subsystem command for the init: sshd runs it
// through the login shell, and its config parser does not keep quotes,
// so no word of it may hold a space or a quote (checkInitPath,
// checkInitArg).
func initCommand(cmd []string, socket string) string {
	return strings.Join(cmd, " ") + " ctl --socket " + socket
}

// shellChars are what a word of the init command may not hold.
const shellChars = " \t\n\"'\\$`;&|<>(){}*?#~"

func checkInitPath(p string) error {
	if !filepath.IsAbs(p) || strings.ContainsAny(p, shellChars) {
		return fmt.Errorf("local provider: init path %q must be absolute, without spaces, quotes or shell characters", p)
	}
	return nil
}

func checkInitArg(a string) error {
	if a == "" || strings.ContainsAny(a, shellChars) {
		return fmt.Errorf("local provider: init argument %q must be a word without spaces, quotes or shell characters", a)
	}
	return nil
}

// errNoInit explains why an sshd sandbox runs no services.
var errNoInit = errors.New("no sbx-init binary beside this program or on PATH, and no InitPath or InitFallback")

// resolveInit is the command sshd mode relays through, in order:
// cfg.InitPath (Validate checked it); else the sbx-init binary find
// returns; else cfg.InitFallback. A found binary or fallback whose path
// sshd_config cannot hold is passed over, saying why if nothing is left.
func resolveInit(cfg Config, find func() string) ([]string, error) {
	if cfg.InitPath != "" {
		return []string{cfg.InitPath}, nil
	}
	var skipped error
	if p := find(); p != "" {
		if skipped = checkInitPath(p); skipped == nil {
			return []string{p}, nil
		}
	}
	if len(cfg.InitFallback) > 0 {
		err := checkInitPath(cfg.InitFallback[0])
		if err == nil {
			return slices.Clone(cfg.InitFallback), nil
		}
		skipped = errors.Join(skipped, err)
	}
	if skipped != nil {
		return nil, skipped
	}
	return nil, errNoInit
}
