package sandboxinit

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podtcp"
)

// The sandbox pod's start-up contract (control/provider/k8s objects.go):
// the mounted Secret at SecretDir holds host_key, user_ca.pub and
// files.json (entries {key, path, mode}: Secret key, path under the home
// directory); sshd listens on the SSH port trusting the CA. A warm pod's
// Secret is replaced when it is claimed: the init notices, installs the
// new files and restarts sshd, so the pod presents the claimed sandbox's
// host key. The forwarder (internal/podtcp) on the forward port proves
// the same host key and trusts the same CA, and switches with sshd.

// InitConfig configures the init proper (RunInit).
type InitConfig struct {
	SecretDir string // the mounted Secret, read only
	RunDir    string // writable: installed keys, sshd_config, control socket
	HomeDir   string // files.json entries land here
	Workspace string // services' working directory
	// ListenAddr is sshd's ListenAddress; empty listens on every address,
	// as a pod, whose network is its own, does. Pods sharing one network
	// (the test kubelet's, each on its own loopback IP) set it.
	ListenAddr string
	SSHPort    int
	// ForwardPort is the podtcp forwarder's port, on ListenAddr's host
	// (every address when empty); 0 runs no forwarder.
	ForwardPort int
	// User is the login name edge certificates name: sshd takes a
	// certificate's principal as the login name, and a pod's sshd serves
	// only the user it runs as. The forwarder requires the same principal.
	User string
	SSHD string // absolute path of sshd
	// Self is the init binary, which sshd runs as "Self ctl --socket S"
	// for the sbx-init subsystem.
	Self string
	// WatchInterval is how often the Secret is checked (default 1 s;
	// kubelet updates a mounted Secret within a minute or so).
	WatchInterval time.Duration
	Logger        *slog.Logger
}

// SocketPath is where the init's control protocol listens under runDir.
func SocketPath(runDir string) string { return filepath.Join(runDir, "init.sock") }

// RunInit installs the Secret's files, runs and supervises sshd, serves
// the control protocol on a unix socket, serves the forwarder and runs the
// services, until ctx ends; then it stops them all and returns.
func RunInit(ctx context.Context, cfg InitConfig) error {
	if cfg.WatchInterval <= 0 {
		cfg.WatchInterval = time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	log := cfg.Logger
	if err := os.MkdirAll(cfg.RunDir, 0o700); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	// sandboxEnv is the Secret's initproto.EnvFile as last installed: services
	// started from then on get it.
	var sandboxEnv atomic.Pointer[[]string]
	sup, err := New(Config{Workspace: cfg.Workspace, Env: []string{
		"HOME=" + cfg.HomeDir, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
	}, SandboxEnv: func() []string {
		if e := sandboxEnv.Load(); e != nil {
			return *e
		}
		return nil
	}, LogDir: filepath.Join(cfg.Workspace, ".sbx", "service-logs"), Logger: log,
		// A pod's PID namespace is the sandbox's own.
		Procs: &ProcScan{}})
	if err != nil {
		return err
	}
	defer sup.Close()

	sock := SocketPath(cfg.RunDir)
	_ = os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", sock, err)
	}
	var wg sync.WaitGroup
	serveCtx, stopServe := context.WithCancel(ctx)
	defer func() {
		stopServe()
		ln.Close()
		wg.Wait()
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := sup.ServeListener(serveCtx, ln); err != nil {
			log.Warn("control socket", "err", err)
		}
	}()

	// keys is what the last install put in place; nil until the first,
	// so a warm pod's forwarder refuses everyone until it is claimed.
	var keys atomic.Pointer[podtcp.Keys]
	if cfg.ForwardPort != 0 {
		fln, err := net.Listen("tcp", net.JoinHostPort(listenHost(cfg.ListenAddr), strconv.Itoa(cfg.ForwardPort)))
		if err != nil {
			return fmt.Errorf("forwarder: %w", err)
		}
		fwd := &podtcp.Forwarder{Logger: log, Keys: func() (podtcp.Keys, error) {
			k := keys.Load()
			if k == nil {
				return podtcp.Keys{}, errors.New("the sandbox's keys are not installed yet")
			}
			return *k, nil
		}}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fwd.Serve(serveCtx, fln); err != nil {
				log.Warn("forwarder", "err", err)
			}
		}()
		log.Info("forwarder listening", "addr", fln.Addr().String())
	}

	var sshd *exec.Cmd
	var sshdDone chan struct{}
	startSSHD := func() error {
		cmd := exec.Command(cfg.SSHD, "-D", "-e", "-f", filepath.Join(cfg.RunDir, "sshd_config"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start sshd: %w", err)
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = cmd.Wait() }()
		sshd, sshdDone = cmd, done
		log.Info("sshd started", "pid", cmd.Process.Pid, "port", cfg.SSHPort)
		return nil
	}
	stopSSHD := func() {
		if sshd == nil {
			return
		}
		_ = syscall.Kill(-sshd.Process.Pid, syscall.SIGTERM)
		select {
		case <-sshdDone:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-sshd.Process.Pid, syscall.SIGKILL)
			<-sshdDone
		}
		sshd = nil
	}
	defer stopSSHD()

	in, err := install(cfg)
	for err != nil { // a warm pod may start before its Secret has keys
		log.Info("waiting for the secret", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(cfg.WatchInterval):
		}
		in, err = install(cfg)
	}
	sum := in.sum
	keys.Store(in.keys)
	sandboxEnv.Store(&in.env)
	bootServices(cfg.SecretDir, sup, log)
	if err := startSSHD(); err != nil {
		return err
	}
	tick := time.NewTicker(cfg.WatchInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info("init stopping")
			return nil
		case <-sshdDone:
			log.Warn("sshd exited; restarting it")
			sshd = nil
			time.Sleep(200 * time.Millisecond)
			if err := startSSHD(); err != nil {
				return err
			}
		case <-tick.C:
			now, err := secretSum(cfg.SecretDir)
			if err != nil || bytes.Equal(now, sum) {
				continue
			}
			in, err := install(cfg)
			if err != nil {
				log.Warn("install changed secret", "err", err)
				continue
			}
			sum = in.sum
			keys.Store(in.keys)
			sandboxEnv.Store(&in.env)
			// The count only: values may be secrets.
			log.Info("secret changed: keys reinstalled; restarting sshd", "env_vars", len(in.env))
			stopSSHD()
			if err := startSSHD(); err != nil {
				return err
			}
		}
	}
}

// bootServices starts the services the Secret declares
// (initproto.ServicesFile), once, at the first install: the pod's
// start, or a warm pod's claim. They start before sshd, so they do not
// wait for control's push, which finds them running; from then on
// control's calls are the authority, and a later change of the Secret
// (not in secretSum) leaves them alone. A file that is missing or does
// not parse starts none: control's push starts them.
func bootServices(secretDir string, sup *Supervisor, log *slog.Logger) {
	b, err := os.ReadFile(filepath.Join(secretDir, initproto.ServicesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var svcs []initproto.Service
	if err == nil {
		svcs, err = initproto.ParseServices(b)
	}
	if err == nil {
		err = sup.Sync(svcs)
	}
	if err != nil {
		log.Warn("start the secret's services", "err", err)
		return
	}
	log.Info("services started from the secret", "services", len(svcs))
}

// secretSum fingerprints the Secret's files (through kubelet's ..data
// symlink swap, which is how a mounted Secret changes).
func secretSum(dir string) ([]byte, error) {
	h := sha256.New()
	for _, name := range []string{"host_key", "user_ca.pub", "files.json", initproto.EnvFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil && !((name == "files.json" || name == initproto.EnvFile) && errors.Is(err, fs.ErrNotExist)) {
			return nil, err
		}
		fmt.Fprintf(h, "%s %d\n", name, len(b))
		h.Write(b)
	}
	return h.Sum(nil), nil
}

// installed is what one install put in place.
type installed struct {
	sum  []byte       // the Secret's fingerprint
	keys *podtcp.Keys // the forwarder's
	env  []string     // the sandbox's environment (initproto.EnvFile)
}

// install copies the host key and CA into RunDir (sshd wants the key
// 0600 and owned by its user, which a Secret mount is not), writes the
// files.json entries under HomeDir, and writes sshd_config with the
// sandbox's environment (initproto.EnvFile) as SetEnv. The forwarder's keys and the
// environment are parsed from the bytes sshd is given, before anything
// is written, so a Secret that does not parse leaves the previous
// install in place.
func install(cfg InitConfig) (installed, error) {
	sum, err := secretSum(cfg.SecretDir)
	if err != nil {
		return installed{}, fmt.Errorf("read secret: %w", err)
	}
	hostKey, err := os.ReadFile(filepath.Join(cfg.SecretDir, "host_key"))
	if err != nil {
		return installed{}, err
	}
	userCA, err := os.ReadFile(filepath.Join(cfg.SecretDir, "user_ca.pub"))
	if err != nil {
		return installed{}, err
	}
	keys, err := parseKeys(hostKey, userCA, cfg.User)
	if err != nil {
		return installed{}, err
	}
	env := []string{}
	if b, err := os.ReadFile(filepath.Join(cfg.SecretDir, initproto.EnvFile)); err == nil {
		if env, err = initproto.ParseEnv(b); err != nil {
			return installed{}, err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return installed{}, fmt.Errorf("read %s: %w", initproto.EnvFile, err)
	}
	for _, f := range []struct {
		name string
		data []byte
		mode fs.FileMode
	}{{"host_key", hostKey, 0o600}, {"user_ca.pub", userCA, 0o644}} {
		if err := writeAtomic(filepath.Join(cfg.RunDir, f.name), f.data, f.mode); err != nil {
			return installed{}, err
		}
	}
	if b, err := os.ReadFile(filepath.Join(cfg.SecretDir, "files.json")); err == nil {
		var entries []struct {
			Key  string `json:"key"`
			Path string `json:"path"`
			Mode uint32 `json:"mode"`
		}
		if err := json.Unmarshal(b, &entries); err != nil {
			return installed{}, fmt.Errorf("files.json: %w", err)
		}
		for _, e := range entries {
			if !filepath.IsLocal(e.Path) || strings.ContainsAny(e.Key, "/\\") {
				return installed{}, fmt.Errorf("files.json: entry %q -> %q leaves the home directory", e.Key, e.Path)
			}
			data, err := os.ReadFile(filepath.Join(cfg.SecretDir, e.Key))
			if err != nil {
				return installed{}, err
			}
			p := filepath.Join(cfg.HomeDir, e.Path)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				return installed{}, err
			}
			mode := fs.FileMode(e.Mode).Perm()
			if mode == 0 {
				mode = 0o600
			}
			if err := writeAtomic(p, data, mode); err != nil {
				return installed{}, err
			}
		}
	}
	conf := SSHDConfig{
		Listen: cfg.ListenAddr, Port: cfg.SSHPort, HostKey: filepath.Join(cfg.RunDir, "host_key"), CAKeys: filepath.Join(cfg.RunDir, "user_ca.pub"),
		PidFile: filepath.Join(cfg.RunDir, "sshd.pid"), InitCommand: cfg.Self + " ctl --socket " + SocketPath(cfg.RunDir),
		SetEnv: env,
	}.String()
	if err := writeAtomic(filepath.Join(cfg.RunDir, "sshd_config"), []byte(conf), 0o600); err != nil {
		return installed{}, err
	}
	return installed{sum: sum, keys: keys, env: env}, nil
}

// parseKeys reads the host key and the trusted CA keys the way sshd
// does: every key line of the CA file counts, other lines are skipped.
func parseKeys(hostKey, userCA []byte, principal string) (*podtcp.Keys, error) {
	signer, err := ssh.ParsePrivateKey(hostKey)
	if err != nil {
		return nil, fmt.Errorf("host_key: %w", err)
	}
	k := &podtcp.Keys{HostKey: signer, Principal: principal}
	for rest := userCA; len(rest) > 0; {
		var ca ssh.PublicKey
		if ca, _, _, rest, err = ssh.ParseAuthorizedKey(rest); err != nil {
			break // no key in what is left
		}
		k.UserCAs = append(k.UserCAs, ca)
	}
	if len(k.UserCAs) == 0 {
		return nil, errors.New("user_ca.pub: no key")
	}
	return k, nil
}

// listenHost is addr's host when it carries a port (sshd's ListenAddress
// may), else addr.
func listenHost(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return addr
}

func writeAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}

// Reap is what PID 1 does: it runs child (the init proper), forwards
// SIGTERM, SIGINT and SIGHUP to it, and reaps every process that ends in
// the namespace, orphans included, so none stays a zombie. When the child
// exits, every process left gets SIGTERM, then SIGKILL after grace, and
// Reap returns the child's exit code. Only PID 1 may call it: it waits
// for any child, so the caller must not use exec.Cmd.Wait on child.
func Reap(child *exec.Cmd, grace time.Duration, log *slog.Logger) (int, error) {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGCHLD)
	defer signal.Stop(sigs)
	if err := child.Start(); err != nil {
		return 1, fmt.Errorf("start the init: %w", err)
	}
	pid := child.Process.Pid
	code := -1
	for code < 0 {
		sig := <-sigs
		if sig != syscall.SIGCHLD {
			_ = syscall.Kill(pid, sig.(syscall.Signal))
			continue
		}
		for {
			var ws syscall.WaitStatus
			got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if err != nil || got <= 0 {
				break
			}
			if got == pid {
				code = ws.ExitStatus()
				if ws.Signaled() {
					code = 128 + int(ws.Signal())
				}
			} else if log != nil {
				log.Debug("reaped", "pid", got)
			}
		}
	}
	// The init is gone: end whatever it left behind.
	_ = syscall.Kill(-1, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.ECHILD) {
			return code, nil
		}
		if got <= 0 {
			time.Sleep(20 * time.Millisecond)
		}
	}
	_ = syscall.Kill(-1, syscall.SIGKILL)
	for {
		var ws syscall.WaitStatus
		if _, err := syscall.Wait4(-1, &ws, 0, nil); err != nil {
			return code, nil
		}
	}
}
