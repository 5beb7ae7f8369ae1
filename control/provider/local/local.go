// Package local is the development provider: a sandbox is a workspace
// directory plus an SSH server on a loopback port, either an embedded Go
// server (default) or the machine's OpenSSH sshd, and a podtcp forwarder
// on another, the edge's plain-TCP road to the sandbox's ports.
//
// Layout under DataDir:
//
//	sandboxes/<id>/workspace/        the workspace (absent while suspended)
//	sandboxes/<id>/home/             HOME for embedded sessions; Spec.Files land here
//	sandboxes/<id>/host_key          the sandbox host key (0600)
//	sandboxes/<id>/ca.pub            the user CA sessions must be signed by
//	sandboxes/<id>/services.json     the declared services, started with the server
//	sandboxes/<id>/meta.json         ports and mode, so restarts keep endpoints
//	sandboxes/<id>/snapshot.tar.gz   the workspace while suspended
//	sandboxes/<id>/service-logs/     the services' output, kept across suspends
//	sandboxes/<id>/init.sock         sshd mode: the services' supervisor
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/podtcp"
)

var (
	_ provider.Provider  = (*Local)(nil)
	_ provider.Suspender = (*Local)(nil)
)

// Modes of Config.Mode.
const (
	ModeEmbedded = "embedded"
	ModeSSHD     = "sshd"
)

// EmbeddedUser is the login name of embedded servers. They run sessions as
// the provider's own OS user whatever the name; this one is just stable.
const EmbeddedUser = "sandbox"

// Config configures the local provider.
type Config struct {
	// DataDir holds every sandbox (see the package doc). Required.
	DataDir string
	// Mode is ModeEmbedded (default) or ModeSSHD.
	Mode string
	// SSHDPath is the absolute path of OpenSSH's sshd for ModeSSHD;
	// default /usr/sbin/sshd. sshd refuses to re-exec from a relative path.
	SSHDPath string
	// SSHDSetEnv are NAME=value pairs sshd sets in every session of
	// ModeSSHD (its SetEnv), before its own (the marker, and HOME as the
	// sandbox's home), so they win where names repeat.
	SSHDSetEnv []string
	// InitPath is the sbx-init binary that sshd runs (as "InitPath ctl
	// --socket S") for the init's subsystem in ModeSSHD, relaying to the
	// supervisor of the sandbox's services; default: sbx-init beside the
	// running program, else on PATH, else InitFallback. Without any,
	// sshd sandboxes run no services (their state reads "unknown").
	InitPath string
	// InitFallback is the host program's own stand-in for sbx-init, for
	// when there is no InitPath and no sbx-init binary to find: its
	// absolute path and the arguments after which it acts as "sbx-init"
	// (sbx dev: the sbx binary and "sandbox-init"; see sandboxinit.Ctl),
	// so that a host run without sbx-init installed still runs services.
	InitFallback []string
	// Logger receives provider events and, at debug, sshd's own log.
	Logger *slog.Logger
}

// setEnvRe is what SSHDSetEnv may hold: sshd_config quoting is not ours
// to get right.
var setEnvRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=[^\s"'\\]*$`)

// specEnvRe is what a spec's Env may hold: a create's env carries any
// printable text, which SSHDConfig quotes; a line break or control
// character could not be delivered (or kept one a line in envFile).
var specEnvRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=[^\x00-\x1f\x7f]*$`)

// Validate reports the first bad field, without side effects.
func (c Config) Validate() error {
	for _, kv := range c.SSHDSetEnv {
		if !setEnvRe.MatchString(kv) {
			return fmt.Errorf("local provider: SSHDSetEnv %q: want NAME=value, the value without spaces or quotes", kv)
		}
		if strings.HasPrefix(kv, markerEnv+"=") {
			return fmt.Errorf("local provider: SSHDSetEnv %q: %s is the provider's own", kv, markerEnv)
		}
	}
	if c.DataDir == "" {
		return errors.New("local provider: DataDir is required")
	}
	switch c.Mode {
	case "", ModeEmbedded, ModeSSHD:
	default:
		return fmt.Errorf("local provider: Mode %q is neither %q nor %q", c.Mode, ModeEmbedded, ModeSSHD)
	}
	if c.Mode == ModeSSHD && c.SSHDPath != "" && !filepath.IsAbs(c.SSHDPath) {
		return fmt.Errorf("local provider: SSHDPath %q must be absolute", c.SSHDPath)
	}
	if c.InitPath != "" {
		if err := checkInitPath(c.InitPath); err != nil {
			return err
		}
	}
	if len(c.InitFallback) > 0 {
		// Its path is checked once it is needed (resolveInit): the host
		// program's own path is not the user's mistake.
		for _, a := range c.InitFallback[1:] {
			if err := checkInitArg(a); err != nil {
				return err
			}
		}
	}
	return nil
}

// server is one running SSH server for a sandbox.
type server interface {
	// stop kills the server and its sessions and waits for them.
	stop()
	// exited is closed if the server died on its own.
	exited() <-chan struct{}
	// servicesStarted says its init started with every service of the
	// spec's Services it was given (Endpoint.ServicesStarted).
	servicesStarted() bool
}

// Local implements provider.Provider on the local machine. Servers it
// starts are owned by it: Close stops them all (workspaces stay on disk).
type Local struct {
	cfg    Config
	logger *slog.Logger
	root   string // DataDir/sandboxes
	user   string // Endpoint.User
	// initCmd is what sshd runs, followed by "ctl --socket S", for the
	// init's subsystem (ModeSSHD); nil: no services.
	initCmd []string

	mu      sync.Mutex // guards running, locks, closed
	running map[string]*instance
	locks   map[string]*sync.Mutex
	closed  bool
}

type instance struct {
	srv      server
	fwd      *forwarder
	endpoint provider.Endpoint
}

// stop stops the forwarder, then the server.
func (i *instance) stop() {
	i.fwd.stop()
	i.srv.stop()
}

// meta is persisted per sandbox so a restarted provider reuses the ports
// control recorded in the sandbox's endpoint.
type meta struct {
	SandboxID   string    `json:"sandbox_id"`
	Port        int       `json:"port"`
	ForwardPort int       `json:"forward_port,omitempty"`
	Mode        string    `json:"mode"`
	CreatedAt   time.Time `json:"created_at"`
}

// New returns a provider over cfg.DataDir. It starts nothing: call Start to
// bring back the servers of sandboxes found on disk.
func New(cfg Config) (*Local, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	inheritDefaultSignals()
	if cfg.Mode == "" {
		cfg.Mode = ModeEmbedded
	}
	if cfg.SSHDPath == "" {
		cfg.SSHDPath = "/usr/sbin/sshd"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("local provider: resolve DataDir: %w", err)
	}
	l := &Local{
		cfg:     cfg,
		logger:  cfg.Logger.With("provider", "local", "mode", cfg.Mode),
		root:    filepath.Join(abs, "sandboxes"),
		user:    EmbeddedUser,
		running: map[string]*instance{},
		locks:   map[string]*sync.Mutex{},
	}
	if cfg.Mode == ModeSSHD {
		// sshd only logs in real accounts, and principal must equal it.
		u, err := user.Current()
		if err != nil {
			return nil, fmt.Errorf("local provider: current user: %w", err)
		}
		l.user = u.Username
		// A named binary that is not there is a mistake to stop at, not
		// a sandbox whose services read "unknown" later.
		if cfg.InitPath != "" && !executable(cfg.InitPath) {
			return nil, fmt.Errorf("local provider: InitPath %q is not an executable file", cfg.InitPath)
		}
		if l.initCmd, err = resolveInit(cfg, findInit); err != nil {
			l.logger.Warn("sshd mode: the sandbox's services will not run", "err", err)
		} else {
			l.logger.Debug("sshd mode: services run through", "init", strings.Join(l.initCmd, " "))
		}
	}
	if err := os.MkdirAll(l.root, 0o700); err != nil {
		return nil, fmt.Errorf("local provider: create %s: %w", l.root, err)
	}
	return l, nil
}

var sandboxIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$`)

func validID(id string) error {
	if !sandboxIDPattern.MatchString(id) {
		return fmt.Errorf("local provider: invalid sandbox id %q", id)
	}
	return nil
}

// Name is what webhook messages say sandboxes run on.
func (l *Local) Name() string { return "local" }

// Host is the machine they run on.
func (l *Local) Host() string {
	h, _ := os.Hostname()
	return h
}

func (l *Local) dir(id string) string { return filepath.Join(l.root, id) }

// lock checks id and serializes lifecycle operations on that sandbox.
func (l *Local) lock(id string) (unlock func(), err error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil, errors.New("local provider: closed")
	}
	m := l.locks[id]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[id] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock, nil
}

// Provision writes the sandbox's files and starts its server, or returns
// the endpoint of the one already running. A suspended sandbox is restored.
func (l *Local) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	return l.provision(ctx, spec, false)
}

// provision is Provision; with restore set, a sandbox with neither a
// workspace nor a snapshot is ErrSnapshotGone rather than a fresh start.
func (l *Local) provision(ctx context.Context, spec provider.Spec, restore bool) (provider.Endpoint, error) {
	unlock, err := l.lock(spec.SandboxID)
	if err != nil {
		return provider.Endpoint{}, err
	}
	defer unlock()
	inPlace := restore && spec.FromSnapshot != ""
	if inPlace {
		// An in-place restore replaces the workspace of a sandbox that
		// may be running: stop it first, as a pod is deleted first.
		if err := l.stopLocked(spec.SandboxID); err != nil {
			return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, err)
		}
	} else if ep, ok := l.runningEndpoint(spec.SandboxID); ok {
		return ep, nil
	}
	dir := l.dir(spec.SandboxID)
	if restore && !inPlace && !exists(filepath.Join(dir, "workspace")) && !exists(filepath.Join(dir, snapshotName)) {
		return provider.Endpoint{}, fmt.Errorf("restore %s: %w", spec.SandboxID, provider.ErrSnapshotGone)
	}
	if err := l.writeSpec(spec); err != nil {
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
	}
	// A fork starts as its snapshot once: a retried provision finds the
	// workspace made.
	fork := !restore && spec.FromSnapshot != "" && !exists(filepath.Join(dir, "workspace")) && !exists(filepath.Join(dir, snapshotName))
	if inPlace || fork {
		if err := l.workspaceFromSnapshot(ctx, spec.SandboxID, spec.FromSnapshot); err != nil {
			return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
		}
	}
	if err := l.restoreWorkspace(spec.SandboxID); err != nil {
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
	}
	ep, err := l.startLocked(ctx, spec.SandboxID)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("provision %s: %w", spec.SandboxID, err)
	}
	return ep, nil
}

// Restore brings a suspended sandbox back; it is Provision, except that
// a sandbox whose snapshot is gone is not restored as an empty one.
func (l *Local) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	return l.provision(ctx, spec, true)
}

// Start restarts the server of every sandbox on disk that has a workspace
// and is not running, e.g. after the process restarted. Suspended sandboxes
// stay suspended. Errors for single sandboxes are joined.
func (l *Local) Start(ctx context.Context) error {
	ids, err := l.ids()
	if err != nil {
		return err
	}
	var errs []error
	for _, id := range ids {
		if !exists(filepath.Join(l.dir(id), "workspace")) {
			continue
		}
		unlock, err := l.lock(id)
		if err != nil {
			return err
		}
		if _, ok := l.runningEndpoint(id); !ok {
			// Processes left by a provider that died without Close (a
			// crash, SIGKILL) belong to the instance that is gone: a
			// restarted pod does not find its old processes either.
			err := endTree(marker(l.dir(id)))
			if err == nil {
				err = l.restoreWorkspace(id)
			}
			if err == nil {
				_, err = l.startLocked(ctx, id)
			}
			if err != nil {
				errs = append(errs, fmt.Errorf("start %s: %w", id, err))
			}
		}
		unlock()
	}
	return errors.Join(errs...)
}

func (l *Local) runningEndpoint(id string) (provider.Endpoint, bool) {
	l.mu.Lock()
	inst := l.running[id]
	if inst == nil {
		l.mu.Unlock()
		return provider.Endpoint{}, false
	}
	select {
	case <-inst.srv.exited():
		// Died on its own: forget it so the caller starts a new one.
		delete(l.running, id)
		l.mu.Unlock()
		l.logger.Warn("sandbox server exited on its own", "sandbox_id", id)
		inst.stop() // reaps; returns at once for a dead server
		return provider.Endpoint{}, false
	default:
		l.mu.Unlock()
		return inst.endpoint, true
	}
}

func (l *Local) writeSpec(spec provider.Spec) error {
	dir := l.dir(spec.SandboxID)
	if err := os.MkdirAll(filepath.Join(dir, "home"), 0o700); err != nil {
		return fmt.Errorf("create sandbox dir: %w", err)
	}
	if _, err := gossh.ParsePrivateKey(spec.HostKeyPEM); err != nil {
		return fmt.Errorf("parse host key: %w", err)
	}
	if _, _, _, _, err := gossh.ParseAuthorizedKey([]byte(spec.UserCAKey)); err != nil {
		return fmt.Errorf("parse user CA key: %w", err)
	}
	if err := writeFileAtomic(filepath.Join(dir, "host_key"), spec.HostKeyPEM, 0o600); err != nil {
		return err
	}
	if err := writeFileAtomic(filepath.Join(dir, "ca.pub"), []byte(spec.UserCAKey), 0o644); err != nil {
		return err
	}
	for _, f := range spec.Files {
		if !filepath.IsLocal(f.Path) {
			return fmt.Errorf("spec file %q: path must stay inside the home dir", f.Path)
		}
		p := filepath.Join(dir, "home", f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return fmt.Errorf("spec file %q: %w", f.Path, err)
		}
		mode := fs.FileMode(f.Mode).Perm()
		if mode == 0 {
			mode = 0o600
		}
		if err := writeFileAtomic(p, f.Data, mode); err != nil {
			return fmt.Errorf("spec file %q: %w", f.Path, err)
		}
	}
	for _, kv := range spec.Env {
		if !specEnvRe.MatchString(kv) {
			// Not echoed: a value may be a secret.
			return fmt.Errorf("spec env %q: want NAME=value, the value without control characters", strings.SplitN(kv, "=", 2)[0])
		}
	}
	// Rewritten on every provision and restore: the env may change
	// (a new gateway address) and is read when the server starts.
	if err := writeFileAtomic(filepath.Join(dir, envFile), []byte(strings.Join(spec.Env, "\n")), 0o600); err != nil {
		return err
	}
	if err := writeServices(dir, spec.Services); err != nil {
		return err
	}
	if _, err := l.readMeta(spec.SandboxID); errors.Is(err, fs.ErrNotExist) {
		return l.writeMeta(meta{SandboxID: spec.SandboxID, Mode: l.cfg.Mode, CreatedAt: time.Now().UTC()})
	} else if err != nil {
		return err
	}
	return nil
}

// startLocked starts the server for id and waits until it answers with the
// sandbox's host key. The caller holds id's lock.
func (l *Local) startLocked(ctx context.Context, id string) (provider.Endpoint, error) {
	dir := l.dir(id)
	m, err := l.readMeta(id)
	if err != nil {
		return provider.Endpoint{}, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, "host_key"))
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("read host key: %w", err)
	}
	hostKey, err := gossh.ParsePrivateKey(keyPEM)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("parse host key: %w", err)
	}
	caLine, err := os.ReadFile(filepath.Join(dir, "ca.pub"))
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("read CA key: %w", err)
	}
	caKey, _, _, _, err := gossh.ParseAuthorizedKey(caLine)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("parse CA key: %w", err)
	}
	env, err := readEnv(dir)
	if err != nil {
		return provider.Endpoint{}, err
	}
	svcs, err := readServices(dir)
	if err != nil {
		return provider.Endpoint{}, err
	}
	logger := l.logger.With("sandbox_id", id)
	ws := filepath.Join(dir, "workspace")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return provider.Endpoint{}, fmt.Errorf("create workspace: %w", err)
	}

	// The forwarder's port is taken before the server's: sshd's port is
	// probed free and bound a moment later, and a fresh listen between
	// the two could be handed that very port.
	fln, err := listenLoopback(m.ForwardPort)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("forwarder: %w", err)
	}
	fport := fln.Addr().(*net.TCPAddr).Port

	var srv server
	var port int
	switch l.cfg.Mode {
	case ModeSSHD:
		srv, port, err = startSSHD(ctx, sshdOptions{
			path: l.cfg.SSHDPath, dir: dir, port: m.Port, hostKey: hostKey.PublicKey(), logger: logger, setEnv: l.cfg.SSHDSetEnv, env: env,
			user: l.user, initCmd: l.initCmd, svcs: svcs,
		})
	default:
		srv, port, err = startEmbedded(ctx, embeddedOptions{
			dir: dir, port: m.Port, user: l.user, env: env, svcs: svcs, hostKey: hostKey, caKey: caKey, logger: logger,
		})
	}
	if err != nil {
		_ = fln.Close()
		return provider.Endpoint{}, err
	}
	inst := &instance{srv: srv, fwd: startForwarder(fln, podtcp.Keys{
		HostKey: hostKey, UserCAs: []gossh.PublicKey{caKey}, Principal: l.user,
	}, logger)}
	if m.Port != port || m.ForwardPort != fport {
		m.Port, m.ForwardPort = port, fport
		if err := l.writeMeta(m); err != nil {
			inst.stop()
			return provider.Endpoint{}, err
		}
	}
	inst.endpoint = provider.Endpoint{
		Addr: fmt.Sprintf("127.0.0.1:%d", port), ForwardAddr: fmt.Sprintf("127.0.0.1:%d", fport), User: l.user, Workspace: ws,
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		inst.stop()
		return provider.Endpoint{}, errors.New("local provider: closed")
	}
	l.running[id] = inst
	l.mu.Unlock()
	ep := inst.endpoint
	// Only this start's: a later call that finds the server running
	// returns inst.endpoint, without it.
	ep.ServicesStarted = srv.servicesStarted()
	logger.Info("sandbox server started", "addr", ep.Addr, "forward_addr", ep.ForwardAddr)
	return ep, nil
}

// stopLocked stops id's server if running, then ends every process the
// sandbox started, detached ones included (see endTree), as deleting a pod
// would. The caller holds id's lock.
func (l *Local) stopLocked(id string) error {
	l.mu.Lock()
	inst := l.running[id]
	delete(l.running, id)
	l.mu.Unlock()
	if inst != nil {
		inst.stop()
	}
	if err := endTree(marker(l.dir(id))); err != nil {
		return fmt.Errorf("end the processes of %s: %w", id, err)
	}
	return nil
}

// Destroy stops the sandbox and deletes everything it had.
func (l *Local) Destroy(ctx context.Context, id string) error {
	unlock, err := l.lock(id)
	if err != nil {
		return err
	}
	defer unlock()
	if err := l.stopLocked(id); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	if err := os.RemoveAll(l.dir(id)); err != nil {
		return fmt.Errorf("destroy %s: %w", id, err)
	}
	l.logger.Info("sandbox destroyed", "sandbox_id", id)
	return nil
}

// Status reports one sandbox. A sandbox with a workspace but no server
// (the provider restarted and Start was not called) is PhaseStopped with
// reason "server_not_running": Restore or Start brings it back.
func (l *Local) Status(ctx context.Context, id string) (provider.Instance, error) {
	if err := validID(id); err != nil {
		return provider.Instance{}, err
	}
	inst := provider.Instance{SandboxID: id}
	if ep, ok := l.runningEndpoint(id); ok {
		inst.Phase, inst.Endpoint = provider.PhaseRunning, ep
		return inst, nil
	}
	dir := l.dir(id)
	switch {
	case exists(filepath.Join(dir, "workspace")):
		inst.Phase, inst.Reason = provider.PhaseStopped, "server_not_running"
	case exists(filepath.Join(dir, snapshotName)):
		inst.Phase = provider.PhaseStopped
	case exists(dir):
		inst.Phase, inst.Reason = provider.PhaseFailed, "workspace_missing"
	default:
		inst.Phase = provider.PhaseNotFound
		return inst, provider.ErrNotFound
	}
	return inst, nil
}

// List reports every sandbox directory.
func (l *Local) List(ctx context.Context) ([]provider.Instance, error) {
	ids, err := l.ids()
	if err != nil {
		return nil, err
	}
	out := make([]provider.Instance, 0, len(ids))
	for _, id := range ids {
		inst, err := l.Status(ctx, id)
		if errors.Is(err, provider.ErrNotFound) {
			continue // destroyed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, inst)
	}
	return out, nil
}

func (l *Local) ids() ([]string, error) {
	entries, err := os.ReadDir(l.root)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && validID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// Close stops every server, ends every process its sandboxes started and
// waits for them. Workspaces stay on disk.
func (l *Local) Close() error {
	l.mu.Lock()
	l.closed = true
	running := l.running
	l.running = map[string]*instance{}
	l.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(running))
	var mu sync.Mutex // guards errs
	for id, inst := range running {
		wg.Go(func() {
			inst.stop()
			if err := endTree(marker(l.dir(id))); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("end the processes of %s: %w", id, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (l *Local) readMeta(id string) (meta, error) {
	var m meta
	b, err := os.ReadFile(filepath.Join(l.dir(id), "meta.json"))
	if err != nil {
		return m, fmt.Errorf("read meta: %w", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("parse meta of %s: %w", id, err)
	}
	return m, nil
}

// envFile holds the spec's Env, one NAME=value a line (0600: it may hold
// the proxy credential), beside the host key.
const envFile = "env"

// readEnv reads the spec's Env; a sandbox provisioned before there was
// one has none.
func readEnv(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, envFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox env: %w", err)
	}
	var env []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if line != "" {
			env = append(env, line)
		}
	}
	return env, nil
}

// writeServices replaces the sandbox's initproto.ServicesFile (0600: a
// service's env may hold a secret), beside envFile, with svcs: on every
// provision and restore, so a declaration changed while suspended
// restores as changed.
func writeServices(dir string, svcs []initproto.Service) error {
	b, err := initproto.EncodeServices(svcs)
	if err != nil {
		return fmt.Errorf("spec %w", err)
	}
	return writeFileAtomic(filepath.Join(dir, initproto.ServicesFile), b, 0o600)
}

// readServices reads the spec's Services; a sandbox provisioned before
// there was the file starts none (control's Sync starts them).
func readServices(dir string) ([]initproto.Service, error) {
	b, err := os.ReadFile(filepath.Join(dir, initproto.ServicesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read sandbox services: %w", err)
	}
	return initproto.ParseServices(b)
}

func (l *Local) writeMeta(m meta) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(l.dir(m.SandboxID), "meta.json"), b, 0o600)
}

// writeFileAtomic writes via a temp file and rename, so a crash never
// leaves a truncated key or meta file.
func writeFileAtomic(path string, data []byte, mode fs.FileMode) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, mode); err != nil { // WriteFile keeps an old file's mode
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	return nil
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// findInit is the sbx-init binary sshd mode relays through: the one
// beside the running program (make build and go install put them
// together), else the first on PATH; "" if neither exists.
func findInit() string {
	if exe, err := os.Executable(); err == nil {
		if p := filepath.Join(filepath.Dir(exe), "sbx-init"); executable(p) {
			return p
		}
	}
	if p, err := exec.LookPath("sbx-init"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return ""
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}
