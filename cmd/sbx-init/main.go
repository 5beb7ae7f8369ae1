// Command sbx-init is the sandbox's init: PID 1 of the sandbox image
// (deploy/docker/sandbox.Dockerfile). As PID 1 it reaps every process and
// runs itself again as the init proper ("serve"): install the mounted
// Secret's keys and files (again whenever the Secret changes, as on a warm
// claim), run and supervise sshd, run the sandbox's services, and end them
// all on SIGTERM. sshd runs "sbx-init ctl" for the sbx-init subsystem,
// which is how control reaches the init. See internal/sandboxinit.
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
	secretDir := fs.String("secret-dir", env("SBX_SECRET_DIR", "/etc/sbx"), "the mounted Secret (host_key, user_ca.pub, files.json)")
	runDir := fs.String("run-dir", env("SBX_RUN_DIR", "/run/sbx"), "writable directory for installed keys, sshd_config and the control socket")
	home := fs.String("home", env("HOME", "/home/sandbox"), "home directory files.json entries are installed under")
	workspace := fs.String("workspace", env("SBX_WORKSPACE", "/workspace"), "the services' working directory")
	sshPort := fs.Int("port", port, "sshd port")
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
			ListenAddr: *listen, SSHPort: *sshPort, SSHD: *sshd, Self: self, Logger: log,
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
