package tart

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Driver is one host's tart: the CLI on this machine (CLI), or a host
// agent on another Mac speaking for its own (see cmd/sbx-macd). Every
// method is safe for concurrent use; names are tart VM names.
type Driver interface {
	// Version is `tart --version`.
	Version(ctx context.Context) (string, error)
	// List is `tart list --format json`, local VMs only.
	List(ctx context.Context) ([]VM, error)
	// Clone is `tart clone src dst`; src may be an OCI reference.
	Clone(ctx context.Context, src, dst string) error
	// Set is `tart set name --cpu N --memory MB`; zero leaves a value.
	Set(ctx context.Context, name string, cpu, memoryMB int) error
	// Rename is `tart rename old new`.
	Rename(ctx context.Context, old, name string) error
	// Run starts `tart run --no-graphics name` (and --suspendable),
	// supervised by the driver, and returns once it is started. It does
	// not wait for the guest to boot (IP does); a run that fails, such as
	// at the licence limit, is reported by Wait.
	Run(ctx context.Context, name string, suspendable bool) error
	// Wait blocks until name's run ends and says how. A VM the driver
	// did not start itself is watched through List.
	Wait(ctx context.Context, name string) (Exit, error)
	// Stop is `tart stop name`; a VM not running is not an error.
	Stop(ctx context.Context, name string) error
	// Suspend is `tart suspend name`.
	Suspend(ctx context.Context, name string) error
	// Delete is `tart delete name`; an absent VM is not an error.
	Delete(ctx context.Context, name string) error
	// IP is `tart ip name --wait S`; ErrNoIP when none came.
	IP(ctx context.Context, name string, wait time.Duration) (string, error)
	// Exec is `tart exec -i name argv...` with stdin.
	Exec(ctx context.Context, name string, stdin []byte, argv ...string) (ExecResult, error)
	// FreeDiskBytes is the free space where tart keeps its VMs.
	FreeDiskBytes(ctx context.Context) (uint64, error)
	// OSVersion is the host's macOS version (`sw_vers -productVersion`).
	OSVersion(ctx context.Context) (string, error)
}

// VM is one entry of `tart list --format json`.
type VM struct {
	Source  string `json:"Source"`
	Name    string `json:"Name"`
	Disk    int    `json:"Disk"`
	Size    int    `json:"Size"`
	Running bool   `json:"Running"`
	State   string `json:"State"` // running, suspended, stopped
}

// Exit is how a `tart run` ended.
type Exit struct {
	Code   int       `json:"code"`
	Stderr string    `json:"stderr,omitempty"` // the last of its output
	At     time.Time `json:"at"`
}

// ExecResult is a finished `tart exec`.
type ExecResult struct {
	ExitCode int    `json:"exit_code"`
	Stdout   []byte `json:"stdout"`
	Stderr   []byte `json:"stderr"`
}

var (
	// ErrNoIP is IP's answer when the guest has no address in time.
	ErrNoIP = errors.New("tart: no IP address found")
	// ErrLimit is a run refused at the licence limit.
	ErrLimit = errors.New("tart: the number of VMs exceeds the system limit")
)

// limitText is Virtualization.framework's refusal of a third VM, which
// `tart run` prints (docs/faketart.md).
const limitText = "number of VMs exceeds the system limit"

// LimitExit reports whether a run ended at the licence limit.
func LimitExit(e Exit) bool { return e.Code != 0 && strings.Contains(e.Stderr, limitText) }

// CLI drives the tart binary at Path on this machine.
type CLI struct {
	Path string
	// SwVers is the sw_vers binary that says the host's macOS version
	// (empty: a sw_vers beside Path, else /usr/bin/sw_vers).
	SwVers string
	// Env is added to tart's environment (TART_HOME, the fake's delays).
	Env    []string
	Logger *slog.Logger

	mu   sync.Mutex // guards runs
	runs map[string]*run
}

type run struct {
	done chan struct{}
	exit Exit
}

// NewCLI returns a driver over the tart binary at path.
func NewCLI(path string, env []string, logger *slog.Logger) *CLI {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &CLI{Path: path, Env: env, Logger: logger, runs: map[string]*run{}}
}

// cmdError is a tart command that failed, with what it said.
type cmdError struct {
	args []string
	code int
	out  string
}

func (e *cmdError) Error() string {
	return fmt.Sprintf("tart %s: exit %d: %s", strings.Join(e.args, " "), e.code, strings.TrimSpace(e.out))
}

func (c *CLI) command(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, c.Path, args...)
	if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	return cmd
}

// tart runs one short command and returns its stdout.
func (c *CLI) tart(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := c.command(ctx, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return out.Bytes(), &cmdError{args: args, code: ee.ExitCode(), out: errb.String() + out.String()}
	}
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", c.Path, err)
	}
	return out.Bytes(), nil
}

func (c *CLI) Version(ctx context.Context) (string, error) {
	out, err := c.tart(ctx, nil, "--version")
	return strings.TrimSpace(string(out)), err
}

func (c *CLI) List(ctx context.Context) ([]VM, error) {
	out, err := c.tart(ctx, nil, "list", "--source", "local", "--format", "json")
	if err != nil {
		return nil, err
	}
	var vms []VM
	if err := json.Unmarshal(out, &vms); err != nil {
		return nil, fmt.Errorf("parse tart list: %w", err)
	}
	return vms, nil
}

func (c *CLI) Clone(ctx context.Context, src, dst string) error {
	_, err := c.tart(ctx, nil, "clone", src, dst)
	return err
}

func (c *CLI) Set(ctx context.Context, name string, cpu, memoryMB int) error {
	args := []string{"set", name}
	if cpu > 0 {
		args = append(args, "--cpu", fmt.Sprint(cpu))
	}
	if memoryMB > 0 {
		args = append(args, "--memory", fmt.Sprint(memoryMB))
	}
	if len(args) == 2 {
		return nil
	}
	_, err := c.tart(ctx, nil, args...)
	return err
}

func (c *CLI) Rename(ctx context.Context, old, name string) error {
	_, err := c.tart(ctx, nil, "rename", old, name)
	return err
}

func (c *CLI) Run(ctx context.Context, name string, suspendable bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.runs[name]; r != nil {
		select {
		case <-r.done:
		default:
			return nil // already running under us
		}
	}
	args := []string{"run", "--no-graphics"}
	if suspendable {
		args = append(args, "--suspendable")
	}
	// Not bound to ctx: the VM outlives the call that started it.
	cmd := c.command(context.Background(), append(args, name)...)
	// Its own group, so a terminal's ^C to the host program does not
	// power off every VM; Pdeathsig so a VM does not outlive the program
	// that supervises it (a restart finds it stopped and boots it again).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	tail := &tailBuffer{}
	cmd.Stdout, cmd.Stderr = tail, tail
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start tart run %s: %w", name, err)
	}
	r := &run{done: make(chan struct{})}
	c.runs[name] = r
	go func() {
		err := cmd.Wait()
		r.exit = Exit{At: time.Now().UTC(), Stderr: tail.String()}
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			r.exit.Code = ee.ExitCode()
		} else if err != nil {
			r.exit.Code = -1
		}
		c.Logger.Info("tart run ended", "vm", name, "code", r.exit.Code)
		close(r.done)
	}()
	return nil
}

func (c *CLI) Wait(ctx context.Context, name string) (Exit, error) {
	c.mu.Lock()
	r := c.runs[name]
	c.mu.Unlock()
	if r != nil {
		select {
		case <-r.done:
			return r.exit, nil
		case <-ctx.Done():
			return Exit{}, ctx.Err()
		}
	}
	// Started by another process (an earlier one of ours): watch the list.
	for {
		vms, err := c.List(ctx)
		if err == nil {
			running := false
			for _, vm := range vms {
				running = running || vm.Name == name && vm.Running
			}
			if !running {
				return Exit{At: time.Now().UTC()}, nil
			}
		}
		select {
		case <-ctx.Done():
			return Exit{}, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

func (c *CLI) Stop(ctx context.Context, name string) error {
	_, err := c.tart(ctx, nil, "stop", name)
	var ce *cmdError
	if errors.As(err, &ce) && notRunning(ce.out) {
		err = nil
	}
	if err == nil {
		c.waitOwn(ctx, name)
	}
	return err
}

// waitOwn waits for a run of ours to be reaped, so a stop's slot is free
// when Stop returns.
func (c *CLI) waitOwn(ctx context.Context, name string) {
	c.mu.Lock()
	r := c.runs[name]
	c.mu.Unlock()
	if r != nil {
		select {
		case <-r.done:
		case <-ctx.Done():
		}
	}
}

func notRunning(out string) bool { return strings.Contains(out, "not running") }

func missing(out string) bool { return strings.Contains(out, "does not exist") }

func (c *CLI) Suspend(ctx context.Context, name string) error {
	_, err := c.tart(ctx, nil, "suspend", name)
	if err == nil {
		c.waitOwn(ctx, name)
	}
	return err
}

func (c *CLI) Delete(ctx context.Context, name string) error {
	_, err := c.tart(ctx, nil, "delete", name)
	var ce *cmdError
	if errors.As(err, &ce) && missing(ce.out) {
		return nil
	}
	return err
}

func (c *CLI) IP(ctx context.Context, name string, wait time.Duration) (string, error) {
	out, err := c.tart(ctx, nil, "ip", name, "--wait", fmt.Sprint(int(wait.Seconds())))
	var ce *cmdError
	if errors.As(err, &ce) && strings.Contains(ce.out, "no IP address found") {
		return "", ErrNoIP
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}

func (c *CLI) Exec(ctx context.Context, name string, stdin []byte, argv ...string) (ExecResult, error) {
	cmd := c.command(ctx, append([]string{"exec", "-i", name}, argv...)...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Stdin = bytes.NewReader(stdin)
	err := cmd.Run()
	res := ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.ExitCode = ee.ExitCode()
		return res, nil
	}
	if err != nil {
		return res, fmt.Errorf("tart exec %s: %w", name, err)
	}
	return res, nil
}

// FreeDiskBytes reads the free space of the file system holding
// TART_HOME (or the home directory's ~/.tart).
func (c *CLI) FreeDiskBytes(ctx context.Context) (uint64, error) {
	dir := os.Getenv("TART_HOME")
	for _, kv := range c.Env {
		if v, ok := strings.CutPrefix(kv, "TART_HOME="); ok {
			dir = v
		}
	}
	dir = existingDir(dir)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return 0, fmt.Errorf("free disk of %s: %w", dir, err)
	}
	return st.Bavail * uint64(st.Bsize), nil
}

// OSVersion runs `sw_vers -productVersion`, with tart's environment.
func (c *CLI) OSVersion(ctx context.Context) (string, error) {
	sv := c.SwVers
	if sv == "" {
		sv = "/usr/bin/sw_vers"
		if tp, err := exec.LookPath(c.Path); err == nil {
			if abs, err := filepath.Abs(tp); err == nil && isExecutable(filepath.Join(filepath.Dir(abs), "sw_vers")) {
				sv = filepath.Join(filepath.Dir(abs), "sw_vers")
			}
		}
	}
	cmd := exec.CommandContext(ctx, sv, "-productVersion")
	if len(c.Env) > 0 {
		cmd.Env = append(cmd.Environ(), c.Env...)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s -productVersion: %w", sv, err)
	}
	return strings.TrimSpace(string(out)), nil
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// tailBuffer keeps the last 4 KB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > 4096 {
		t.buf = t.buf[len(t.buf)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}

var _ Exporter = (*CLI)(nil)

// Export is `tart export name FILE`, streamed to w.
func (c *CLI) Export(ctx context.Context, name string, w io.Writer) error {
	dir, err := os.MkdirTemp("", "sbx-tart-export-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, name+".tvm")
	if _, err := c.tart(ctx, nil, "export", name, path); err != nil {
		return err
	}
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// Import is `tart import FILE name`, from r.
func (c *CLI) Import(ctx context.Context, name string, r io.Reader) error {
	dir, err := os.MkdirTemp("", "sbx-tart-import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, name+".tvm")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	_, err = c.tart(ctx, nil, "import", path, name)
	return err
}
