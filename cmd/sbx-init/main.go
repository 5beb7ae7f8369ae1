// Command sbx-init is the sandbox's init: PID 1 of the sandbox image
// (deploy/docker/sandbox.Dockerfile). As PID 1 it reaps every process and
// runs itself again as the init proper ("serve"): install the mounted
// Secret's keys and files (again whenever the Secret changes, as on a warm
// claim), run and supervise sshd, serve the edge's forwarder
// (internal/podtcp) with the same keys, run the sandbox's services, and
// end them all on SIGTERM. sshd runs "sbx-init ctl" for the sbx-init
// subsystem, which is how control reaches the init. See
// internal/sandboxinit.
//
//	sbx-init            PID 1: reap, forward signals, run "serve"
//	sbx-init serve      the init proper (also usable without PID 1)
//	sbx-init ctl        relay stdin/stdout to the init's control socket
package main

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"os/user"
	"strconv"
	"syscall"
	"time"

	"github.com/sbxedge/sbx/internal/sandboxinit"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(args []string) int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("component", "sbx-init")
	if len(args) > 0 && args[0] == "ctl" {
		return sandboxinit.Ctl(context.Background(), "sbx-init ctl", args[1:], os.Getenv, os.Stdin, os.Stdout, os.Stderr)
	}
	mode := ""
	if len(args) > 0 && args[0] == "serve" {
		mode, args = args[0], args[1:]
	}
	fs := flag.NewFlagSet("sbx-init", flag.ContinueOnError)
	port, _ := strconv.Atoi(env("SBX_SSH_PORT", "2222"))
	fwdPort, _ := strconv.Atoi(env("SBX_FORWARD_PORT", "2223"))
	// sshd logs in the user it runs as, unless told which user the pod's
	// certificates name.
	login := os.Getenv("SBX_USER")
	if login == "" {
		if u, err := user.Current(); err == nil {
			login = u.Username
		}
	}
	secretDir := fs.String("secret-dir", env("SBX_SECRET_DIR", "/etc/sbx"), "the mounted Secret (host_key, user_ca.pub, files.json)")
	runDir := fs.String("run-dir", env("SBX_RUN_DIR", "/run/sbx"), "writable directory for installed keys, sshd_config and the control socket")
	home := fs.String("home", env("HOME", "/home/sandbox"), "home directory files.json entries are installed under")
	workspace := fs.String("workspace", env("SBX_WORKSPACE", "/workspace"), "the services' working directory")
	sshPort := fs.Int("port", port, "sshd port")
	forwardPort := fs.Int("forward-port", fwdPort, "the edge's forwarder port (0: none)")
	loginUser := fs.String("user", login, "the login name the edge's certificates name (default the current user)")
	listen := fs.String("listen-addr", env("SBX_SSH_ADDR", ""), "sshd's listen address (default every address)")
	sshd := fs.String("sshd", "/usr/sbin/sshd", "absolute path of sshd")
	grace := fs.Duration("grace", 5*time.Second, "PID 1: how long processes left behind get between SIGTERM and SIGKILL")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if mode == "serve" {
		self, err := os.Executable()
		if err != nil {
			log.Error("find own binary", "err", err)
			return 1
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		err = sandboxinit.RunInit(ctx, sandboxinit.InitConfig{
			SecretDir: *secretDir, RunDir: *runDir, HomeDir: *home, Workspace: *workspace,
			ListenAddr: *listen, SSHPort: *sshPort, ForwardPort: *forwardPort, User: *loginUser, SSHD: *sshd, Self: self, Logger: log,
		})
		if err != nil {
			log.Error("init failed", "err", err)
			return 1
		}
		return 0
	}
	if os.Getpid() != 1 {
		// Not PID 1: nobody else's orphans are ours to reap.
		return run(append([]string{"serve"}, args...))
	}
	self, err := os.Executable()
	if err != nil {
		log.Error("find own binary", "err", err)
		return 1
	}
	child := exec.Command(self, append([]string{"serve"}, args...)...)
	child.Stdin, child.Stdout, child.Stderr = nil, os.Stdout, os.Stderr
	code, err := sandboxinit.Reap(child, *grace, log)
	if err != nil {
		log.Error("pid 1", "err", err)
	}
	return code
}
