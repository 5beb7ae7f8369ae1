package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The fleet's processes: each is a real binary started from this program,
// its output in a log file under the fleet's folder, killed with it
// (Pdeathsig) if this program dies first.

// proc is one child process that can be started, killed with SIGKILL,
// stopped with SIGSTOP and continued.
type proc struct {
	name string
	bin  string
	args []string
	log  string // file both output streams go to
	env  []string
	// uid/gid, when set, run the process as another user (Postgres
	// refuses to run as root).
	uid, gid uint32

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has been waited for
}

// start runs p; a running p is an error.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), p.env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.uid != 0 {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: p.uid, Gid: p.gid}
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", p.name, err)
	}
	done := make(chan struct{})
	go func() { // ends when the child does
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

// pid is the running process's id, 0 if none.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// signal sends sig to the running process.
func (p *proc) signal(sig syscall.Signal) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.name)
	}
	return p.cmd.Process.Signal(sig)
}

// kill sends SIGKILL (or SIGTERM when gentle) and waits for the exit.
func (p *proc) kill(gentle bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	sig := syscall.SIGKILL
	if gentle {
		sig = syscall.SIGTERM
		_ = cmd.Process.Signal(syscall.SIGCONT) // a stopped process cannot end
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// tail is the end of p's log, for an error message.
func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// waitTCP waits until addr accepts a connection, p exits, or ctx ends.
func (p *proc) waitTCP(ctx context.Context, addr string, limit time.Duration) error {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	deadline := time.Now().Add(limit)
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("%s exited before listening on %s:\n%s", p.name, addr, p.tail())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %v:\n%s", p.name, addr, limit, p.tail())
		}
	}
}

// freeAddr is a loopback address nothing listens on right now, below
// Linux's ephemeral range (32768-60999): a process restarted on the same
// port (an edge, Redis, Postgres) could otherwise find it taken as some
// outgoing connection's source port (see internal/testkit/redistest.FreeAddr).
func freeAddr() (string, error) {
	var last error
	for range 100 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err != nil {
			last = err
			continue
		}
		defer ln.Close()
		return ln.Addr().String(), nil
	}
	return "", fmt.Errorf("no free port below the ephemeral range: %w", last)
}

func mustFreeAddrs(n int) ([]string, error) {
	out := make([]string, n)
	for i := range out {
		a, err := freeAddr()
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// buildBinaries builds cmd/control and cmd/edge into dir with the go
// tool, from the module this program is run in. The control is built
// with -tags sbxlocal: the fleet's sandboxes run on this machine
// (--provider local), which the replica image does not link.
func buildBinaries(ctx context.Context, dir string) (control, edge string, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", "", err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "sbxlocal", "-o", dir+string(os.PathSeparator), "./cmd/control", "./cmd/edge")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("go build: %w\n%s", err, out)
	}
	return filepath.Join(dir, "control"), filepath.Join(dir, "edge"), nil
}

// moduleRoot is the folder of the go.mod above the working directory.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("run from inside the sbx module")
	}
	return filepath.Dir(mod), nil
}

// balancer spreads TCP connections over backends as a Kubernetes Service
// does: each new connection goes to the next backend that accepts a dial,
// so a dead replica is skipped as soon as its port refuses.
type balancer struct {
	ln       net.Listener
	backends []string
	mu       sync.Mutex
	next     int
	wg       sync.WaitGroup
	conns    map[net.Conn]struct{}
}

func newBalancer(backends ...string) (*balancer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Go(b.serve)
	return b, nil
}

func (b *balancer) addr() string { return b.ln.Addr().String() }

func (b *balancer) serve() {
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Go(func() { b.relay(c) })
	}
}

func (b *balancer) track(c net.Conn, add bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if add {
		b.conns[c] = struct{}{}
	} else {
		delete(b.conns, c)
	}
}

func (b *balancer) relay(c net.Conn) {
	defer c.Close()
	b.mu.Lock()
	start := b.next
	b.next++
	b.mu.Unlock()
	var up net.Conn
	for i := range b.backends {
		var err error
		if up, err = net.DialTimeout("tcp", b.backends[(start+i)%len(b.backends)], time.Second); err == nil {
			break
		}
	}
	if up == nil {
		return
	}
	defer up.Close()
	b.track(c, true)
	b.track(up, true)
	defer b.track(c, false)
	defer b.track(up, false)
	done := make(chan struct{})
	go func() { // ends when either side closes
		_, _ = io.Copy(up, c)
		up.Close()
		close(done)
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	<-done
}

// close stops accepting, cuts every relayed connection and waits.
func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}

// portOf is addr's port.
func portOf(addr string) int {
	_, p, _ := net.SplitHostPort(addr)
	n, _ := strconv.Atoi(p)
	return n
}
