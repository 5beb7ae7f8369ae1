// Package sandboxinit is the program of ours that runs inside a sandbox:
// the supervisor of the sandbox's declared services (a dev server, a
// database), started when the sandbox becomes ready, restarted with
// backoff when they exit, started again after every restore (control
// pushes the declared set each time the sandbox becomes ready).
//
// One implementation, two launchers: the local provider runs a Supervisor
// in process per sandbox and serves its control protocol as the SSH
// subsystem "sbx-init" of the sandbox's embedded server; a sandbox pod
// runs it as PID 1, with sshd's Subsystem line pointing at the init's
// control command. Control and the edge reach it only over the sandbox's
// SSH connection (see Client), never over a network path of its own.
package sandboxinit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Config configures a Supervisor.
type Config struct {
	// Workspace is the services' default working directory. Required.
	Workspace string
	// Env is every service's base environment (HOME, USER, PATH...);
	// a service's own Env overrides it.
	Env []string
	// SandboxEnv, when set, is read at every start of a service and comes
	// after Env, before the service's own: the sandbox's environment
	// (initproto.EnvFile), which a warm pod learns only when it is claimed.
	SandboxEnv func() []string
	// MinBackoff and MaxBackoff bound the wait before a restart (default
	// 500 ms and 30 s); it doubles with each exit in a row of a service
	// that ran less than StableAfter (default 10 s).
	MinBackoff, MaxBackoff, StableAfter time.Duration
	// StopGrace is how long a stopped service has between SIGTERM and
	// SIGKILL (default 5 s).
	StopGrace time.Duration
	// LogLines is how many lines of output are kept per service
	// (default 1000).
	LogLines int
	// LogDir, when set, keeps each service's output in <name>.log there
	// (JSON lines, at most about LogLines), so the output of the runs
	// before a restore is still shown after it. It must outlive the
	// init: a local sandbox's directory, or the pod's workspace volume.
	LogDir string
	// Procs, when set, lets the init report work running in the sandbox
	// (op busy); nil: it answers busy with an error, so the idle detector
	// never reads its silence as idle.
	Procs  *ProcScan
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.MinBackoff <= 0 {
		c.MinBackoff = 500 * time.Millisecond
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 30 * time.Second
	}
	if c.StableAfter <= 0 {
		c.StableAfter = 10 * time.Second
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 5 * time.Second
	}
	if c.LogLines <= 0 {
		c.LogLines = 1000
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Backoff is the wait before restart number n (1 for the first restart
// after a run shorter than StableAfter): MinBackoff doubled n-1 times,
// at most MaxBackoff.
func (c Config) Backoff(n int) time.Duration {
	d := c.MinBackoff
	for i := 1; i < n && d < c.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, c.MaxBackoff)
}

// Supervisor runs services. Close stops them all and waits.
type Supervisor struct {
	cfg Config

	mu       sync.Mutex // guards services, closed
	services map[string]*proc
	closed   bool
	wg       sync.WaitGroup // one per proc run loop
}

// New returns a Supervisor running nothing yet.
func New(cfg Config) (*Supervisor, error) {
	if cfg.Workspace == "" {
		return nil, errors.New("sandboxinit: Workspace is required")
	}
	cfg.setDefaults()
	return &Supervisor{cfg: cfg, services: map[string]*proc{}}, nil
}

// Sync makes the running set exactly svcs: new ones start, changed ones
// restart, missing ones stop. Unchanged ones keep running untouched.
func (s *Supervisor) Sync(svcs []Service) error {
	want := map[string]Service{}
	for _, sv := range svcs {
		if err := sv.Validate(); err != nil {
			return fmt.Errorf("service %q: %w", sv.Name, err)
		}
		want[sv.Name] = sv
	}
	s.mu.Lock()
	var stale []*proc
	for name, p := range s.services {
		if w, ok := want[name]; !ok || !w.Same(p.svc) {
			stale = append(stale, p)
			delete(s.services, name)
		}
	}
	s.mu.Unlock()
	for _, p := range stale {
		p.stop()
	}
	for _, sv := range svcs {
		if err := s.start(sv, false); err != nil {
			return err
		}
	}
	return nil
}

// Put starts sv, replacing (stopping first) a different service of the
// same name; the same declaration again changes nothing.
func (s *Supervisor) Put(sv Service) error {
	if err := sv.Validate(); err != nil {
		return err
	}
	return s.start(sv, true)
}

func (s *Supervisor) start(sv Service, replace bool) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return errors.New("sandboxinit: supervisor stopped")
	}
	old := s.services[sv.Name]
	if old != nil && old.svc.Same(sv) {
		s.mu.Unlock()
		return nil
	}
	if old != nil && !replace {
		s.mu.Unlock()
		return nil
	}
	p := newProc(s.cfg, sv)
	s.services[sv.Name] = p
	s.wg.Add(1)
	s.mu.Unlock()
	if old != nil {
		old.stop()
	}
	go func() { defer s.wg.Done(); p.run() }()
	return nil
}

// Delete stops and forgets a service.
func (s *Supervisor) Delete(name string) error {
	s.mu.Lock()
	p := s.services[name]
	delete(s.services, name)
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w %q", ErrUnknownService, name)
	}
	p.stop()
	return nil
}

// List reports every service, by name.
func (s *Supervisor) List() []Status {
	s.mu.Lock()
	procs := make([]*proc, 0, len(s.services))
	for _, p := range s.services {
		procs = append(procs, p)
	}
	s.mu.Unlock()
	out := make([]Status, 0, len(procs))
	for _, p := range procs {
		out = append(out, p.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Logs writes the last tail lines of a service's output to emit, then,
// with follow, every new line until ctx ends or the service is removed.
func (s *Supervisor) Logs(ctx context.Context, name string, tail int, follow bool, emit func(Line) error) error {
	s.mu.Lock()
	p := s.services[name]
	s.mu.Unlock()
	if p == nil {
		return fmt.Errorf("%w %q", ErrUnknownService, name)
	}
	return p.logs.read(ctx, tail, follow, emit)
}

// Close stops every service and waits for them. Call it once.
func (s *Supervisor) Close() {
	s.mu.Lock()
	s.closed = true
	procs := s.services
	s.services = map[string]*proc{}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range procs {
		wg.Add(1)
		go func() { defer wg.Done(); p.stop() }()
	}
	wg.Wait()
	s.wg.Wait()
}

// proc is one service's run loop: start, wait, back off, start again,
// until stop.
type proc struct {
	cfg  Config
	svc  Service
	logs *logRing
	log  *slog.Logger

	stopOnce sync.Once
	stopCh   chan struct{} // closed by stop
	done     chan struct{} // closed when run returned

	mu        sync.Mutex // guards the fields below
	state     string
	exitCode  *int
	starts    int
	lastStart *time.Time
	lastExit  *time.Time
	pid       int
	inARow    int // quick exits in a row
}

func newProc(cfg Config, sv Service) *proc {
	return &proc{
		cfg: cfg, svc: sv, logs: newLogRing(cfg.LogLines, logFile(cfg.LogDir, sv.Name)), log: cfg.Logger.With("service", sv.Name),
		stopCh: make(chan struct{}), done: make(chan struct{}), state: StateStarting,
	}
}

func (p *proc) status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := Status{Service: p.svc, State: p.state, Starts: p.starts, PID: p.pid, ExitCode: p.exitCode,
		LastStartAt: p.lastStart, LastExitAt: p.lastExit}
	if p.state != StateRunning {
		st.QuickExits = p.inARow
	}
	return st
}

func (p *proc) set(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
}

// stop ends the run loop, and the process with SIGTERM (SIGKILL after the
// grace), and waits for it.
func (p *proc) stop() {
	p.stopOnce.Do(func() { close(p.stopCh) })
	<-p.done
}

func (p *proc) run() {
	defer close(p.done)
	defer p.logs.close()
	inARow := 0
	for {
		began := time.Now()
		code, err := p.once()
		if err != nil {
			p.logs.add(fmt.Sprintf("sbx-init: %s could not start: %v", p.svc.Name, err))
		}
		select {
		case <-p.stopCh:
			p.set(func() { p.state = StateExited })
			return
		default:
		}
		if time.Since(began) >= p.cfg.StableAfter {
			inARow = 0
		}
		inARow++
		wait := p.cfg.Backoff(inARow)
		quick := 0
		if time.Since(began) < p.cfg.StableAfter {
			quick = inARow
		}
		p.set(func() { p.state, p.inARow = StateRestarting, quick })
		p.logs.add(fmt.Sprintf("sbx-init: %s exited with code %d; restarting in %s", p.svc.Name, code, wait))
		t := time.NewTimer(wait)
		select {
		case <-p.stopCh:
			t.Stop()
			p.set(func() { p.state = StateExited })
			return
		case <-t.C:
		}
	}
}

// once runs the service one time and returns its exit code.
func (p *proc) once() (int, error) {
	var cmd *exec.Cmd
	if len(p.svc.Args) == 0 {
		cmd = exec.Command("/bin/sh", "-c", p.svc.Command)
	} else {
		cmd = exec.Command(p.svc.Command, p.svc.Args...)
	}
	cmd.Dir = filepath.Join(p.cfg.Workspace, p.svc.Cwd)
	cmd.Env = slices.Clone(p.cfg.Env)
	if p.cfg.SandboxEnv != nil {
		cmd.Env = append(cmd.Env, p.cfg.SandboxEnv()...)
	}
	cmd.Env = append(cmd.Env, "SBX_SERVICE="+p.svc.Name)
	if p.svc.Port != 0 {
		cmd.Env = append(cmd.Env, "PORT="+strconv.Itoa(p.svc.Port))
	}
	for k, v := range p.svc.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so stop reaches what it forks; Pdeathsig so
	// it does not outlive an init that dies without stopping it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	pr, pw, err := os.Pipe()
	if err != nil {
		return -1, err
	}
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = pw, pw
	now := time.Now().UTC()
	var n int
	p.set(func() {
		p.starts++
		n = p.starts
		p.lastStart = &now
		p.state = StateStarting
	})
	p.logs.add(fmt.Sprintf("sbx-init: starting %s: %s", p.svc.Name, p.commandLine()))
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		// A missing cwd fails the fork with the program's name on it
		// ("fork/exec /usr/bin/npm: no such file or directory"), which
		// sends people looking for a program that is there.
		if _, serr := os.Stat(cmd.Dir); serr != nil {
			err = fmt.Errorf("cwd %q is not a folder in the workspace (create it, or set --cwd): %w", p.svc.Cwd, serr)
		}
		code := 127
		p.exited(code)
		return code, err
	}
	pw.Close()
	pid := cmd.Process.Pid
	p.set(func() { p.pid = pid })
	p.log.Info("service started", "pid", pid, "start", n)
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		p.logs.copyLines(pr)
	}()
	waited := make(chan struct{})
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		p.probe(waited)
	}()
	stopped := make(chan struct{})
	go func() {
		select {
		case <-p.stopCh:
			_ = syscall.Kill(-pid, syscall.SIGTERM)
			t := time.NewTimer(p.cfg.StopGrace)
			defer t.Stop()
			select {
			case <-t.C:
				_ = syscall.Kill(-pid, syscall.SIGKILL)
			case <-waited:
			}
		case <-waited:
		}
		close(stopped)
	}()
	err = cmd.Wait()
	close(waited)
	<-stopped
	<-probeDone
	// Whatever the service left in its group goes with it, so a restart
	// finds its port free and the log pipe closes.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-readDone
	pr.Close()
	code := exitCode(cmd.ProcessState, err)
	p.exited(code)
	p.log.Info("service exited", "pid", pid, "code", code)
	return code, nil
}

func (p *proc) exited(code int) {
	now := time.Now().UTC()
	p.set(func() {
		p.exitCode = &code
		p.lastExit = &now
		p.pid = 0
	})
}

// commandLine is the service's command on one line for its log, long
// arguments (an inline script) shortened.
func (p *proc) commandLine() string {
	words := []string{p.svc.Command}
	if len(p.svc.Args) > 0 {
		words = append(words, p.svc.Args...)
	}
	for i, w := range words {
		if len(w) > 60 {
			w = w[:57] + "..."
		}
		if strings.ContainsAny(w, " \t\n\"'") && !(i == 0 && len(p.svc.Args) == 0) {
			w = strconv.Quote(w)
		}
		words[i] = strings.ReplaceAll(w, "\n", " ")
	}
	return strings.Join(words, " ")
}

// probe moves the service to running: at once without a port, else once
// its port accepts on either loopback address.
func (p *proc) probe(waited <-chan struct{}) {
	if p.svc.Port == 0 {
		p.set(func() { p.state = StateRunning })
		return
	}
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		if portAnswers(p.svc.Port) {
			p.set(func() { p.state = StateRunning })
			return
		}
		select {
		case <-waited:
			return
		case <-t.C:
		}
	}
}

// portAnswers is PortAnswers; a test swaps it to count the probes.
var portAnswers = PortAnswers

// PortAnswers reports whether something accepts TCP on port at 127.0.0.1
// or ::1.
func PortAnswers(port int) bool {
	for _, h := range []string{"127.0.0.1", "::1"} {
		c, err := net.DialTimeout("tcp", net.JoinHostPort(h, strconv.Itoa(port)), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return true
		}
	}
	return false
}

func exitCode(st *os.ProcessState, err error) int {
	if st == nil {
		if err != nil {
			return -1
		}
		return 0
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return st.ExitCode()
}

// logRing keeps the last lines of a service's output and wakes followers.
// With a file, lines are appended to it as JSON and the file is read back
// when the ring is made; it is rewritten from the ring when it holds
// twice the ring's lines, so it stays bounded.
type logRing struct {
	max  int
	path string // "" keeps output in memory only

	mu      sync.Mutex // guards everything below
	lines   []Line
	seq     int           // lines ever added
	wake    chan struct{} // closed and replaced on every add
	closed  bool
	f       *os.File
	inFile  int // lines in f
	fileErr bool
}

func logFile(dir, name string) string {
	if dir == "" {
		return ""
	}
	return filepath.Join(dir, name+".log")
}

func newLogRing(max int, path string) *logRing {
	r := &logRing{max: max, path: path, wake: make(chan struct{})}
	if path == "" {
		return r
	}
	if b, err := os.ReadFile(path); err == nil {
		for _, raw := range strings.Split(string(b), "\n") {
			var l Line
			if raw != "" && json.Unmarshal([]byte(raw), &l) == nil {
				r.lines = append(r.lines, l)
			}
		}
		r.inFile = len(r.lines)
		if len(r.lines) > max {
			r.lines = r.lines[len(r.lines)-max:]
		}
	}
	return r
}

func (r *logRing) add(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := Line{At: time.Now().UTC(), Text: text}
	r.lines = append(r.lines, l)
	if len(r.lines) > r.max {
		r.lines = r.lines[len(r.lines)-r.max:]
	}
	r.seq++
	close(r.wake)
	r.wake = make(chan struct{})
	r.persist(l)
}

// persist appends l to the file; the caller holds mu. A failing disk
// costs the history, never the service: errors only stop persisting.
func (r *logRing) persist(l Line) {
	if r.path == "" || r.fileErr {
		return
	}
	if r.f == nil || r.inFile >= 2*r.max {
		if r.f != nil {
			r.f.Close()
		}
		// (Re)write the file from the ring, then append to it.
		var b []byte
		for _, x := range r.lines {
			j, _ := json.Marshal(x)
			b = append(append(b, j...), '\n')
		}
		if err := os.MkdirAll(filepath.Dir(r.path), 0o700); err != nil {
			r.fileErr = true
			return
		}
		if err := os.WriteFile(r.path, b, 0o600); err != nil {
			r.fileErr = true
			return
		}
		f, err := os.OpenFile(r.path, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			r.fileErr = true
			return
		}
		r.f, r.inFile = f, len(r.lines)
		return
	}
	j, _ := json.Marshal(l)
	if _, err := r.f.Write(append(j, '\n')); err != nil {
		r.fileErr = true
		return
	}
	r.inFile++
}

func (r *logRing) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.closed = true
		close(r.wake)
	}
	if r.f != nil {
		r.f.Close()
		r.f = nil
	}
}

// copyLines adds each line read from rd until EOF. Overlong lines are
// cut at 64 KiB.
func (r *logRing) copyLines(rd io.Reader) {
	sc := bufio.NewScanner(rd)
	sc.Buffer(make([]byte, 4096), 64<<10)
	for sc.Scan() {
		r.add(sc.Text())
	}
	if sc.Err() != nil {
		_, _ = io.Copy(io.Discard, rd) // keep the writer from blocking
	}
}

func (r *logRing) read(ctx context.Context, tail int, follow bool, emit func(Line) error) error {
	r.mu.Lock()
	start := max(len(r.lines)-tail, 0)
	batch := slices.Clone(r.lines[start:])
	seq, wake, closed := r.seq, r.wake, r.closed
	r.mu.Unlock()
	for {
		for _, l := range batch {
			if err := emit(l); err != nil {
				return err
			}
		}
		if !follow || closed {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		}
		r.mu.Lock()
		n := min(r.seq-seq, len(r.lines))
		batch = slices.Clone(r.lines[len(r.lines)-n:])
		seq, wake, closed = r.seq, r.wake, r.closed
		r.mu.Unlock()
	}
}
