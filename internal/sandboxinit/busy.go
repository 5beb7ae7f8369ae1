package sandboxinit

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ProcScan says how an init finds its sandbox's processes in /proc.
type ProcScan struct {
	// Root is the proc file system (default /proc).
	Root string
	// Belongs reports whether a process whose environment (NUL-separated,
	// as /proc/PID/environ holds it) is this sandbox's; nil: every
	// process the init can see (a pod's own PID namespace). A local
	// sandbox's carry its marker variable.
	Belongs func(environ []byte) bool
	// Window is how long CPU use is sampled over (default 250 ms).
	Window time.Duration
}

// clockTicks is USER_HZ, what /proc/PID/stat counts CPU time in: 100 on
// every Linux architecture the sandboxes run on.
const clockTicks = 100

type procSample struct {
	comm    string
	ticks   uint64
	work    bool
	running bool
}

// scan reads every process of the sandbox once. exclude are PIDs of the
// caller's own machinery (the relay serving this call).
func (p ProcScan) scan(exclude []int) (map[int]procSample, error) {
	root := p.Root
	if root == "" {
		root = "/proc"
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	self := os.Getpid()
	listening := listeningInodes(root)
	out := map[int]procSample{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile(filepath.Join(root, e.Name(), "environ"))
		if err != nil {
			continue // gone, or another user's
		}
		if p.Belongs != nil && !p.Belongs(env) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join(root, e.Name(), "stat"))
		if err != nil {
			continue
		}
		s, ok := parseStat(stat)
		if !ok {
			continue
		}
		s.work = s.running && pid != 1 && !slices.Contains(exclude, pid) &&
			!strings.HasPrefix(s.comm, "sshd") && !isService(env) &&
			!listens(filepath.Join(root, e.Name(), "fd"), listening)
		out[pid] = s
	}
	return out, nil
}

// listeningInodes are the socket inodes of every listening TCP socket
// (state 0A in /proc/net/tcp and tcp6).
func listeningInodes(root string) map[string]bool {
	out := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(filepath.Join(root, "net", f))
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			fields := strings.Fields(line)
			if i == 0 || len(fields) < 10 || fields[3] != "0A" {
				continue
			}
			out[fields[9]] = true
		}
	}
	return out
}

// listens reports whether the process whose fd directory is fdDir holds
// one of the listening sockets.
func listens(fdDir string, listening map[string]bool) bool {
	if len(listening) == 0 {
		return false
	}
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return false
	}
	for _, e := range ents {
		l, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err == nil && strings.HasPrefix(l, "socket:[") && listening[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] {
			return true
		}
	}
	return false
}

// parseStat reads comm, state and utime+stime from /proc/PID/stat. comm
// is in parentheses and may itself hold spaces and parentheses, so the
// fields are counted from the last ')'.
func parseStat(b []byte) (procSample, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procSample{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return procSample{}, false
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return procSample{}, false
	}
	return procSample{comm: string(b[open+1 : end]), ticks: ut + st, running: f[0] != "Z" && f[0] != "X"}, true
}

// isService reports whether an environment is a service's (the
// supervisor sets SBX_SERVICE on each, and their children inherit it).
func isService(env []byte) bool {
	for kv := range bytes.SplitSeq(env, []byte{0}) {
		if bytes.HasPrefix(kv, []byte("SBX_SERVICE=")) {
			return true
		}
	}
	return false
}

// Sample scans twice, Window apart, and reports the work found and the
// CPU used between the scans.
func (p ProcScan) Sample(ctx context.Context, exclude []int) (Busy, error) {
	window := p.Window
	if window <= 0 {
		window = 250 * time.Millisecond
	}
	first, err := p.scan(exclude)
	if err != nil {
		return Busy{}, err
	}
	start := time.Now()
	t := time.NewTimer(window)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return Busy{}, ctx.Err()
	case <-t.C:
	}
	second, err := p.scan(exclude)
	if err != nil {
		return Busy{}, err
	}
	elapsed := time.Since(start).Seconds()
	b := Busy{Processes: []BusyProcess{}}
	var ticks uint64
	pids := make([]int, 0, len(second))
	for pid := range second {
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	for _, pid := range pids {
		s := second[pid]
		if before, ok := first[pid]; ok && s.ticks >= before.ticks {
			ticks += s.ticks - before.ticks
		}
		if s.work {
			b.Processes = append(b.Processes, BusyProcess{PID: pid, Command: s.comm})
		}
	}
	b.CPU = float64(ticks) / clockTicks / elapsed
	return b, nil
}

// peerPID is the PID at the other end of a unix socket connection (the
// relay sshd runs for a control call), 0 when it cannot be told.
func peerPID(c net.Conn) int {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return 0
	}
	pid := 0
	_ = raw.Control(func(fd uintptr) {
		if cred, err := unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED); err == nil {
			pid = int(cred.Pid)
		}
	})
	return pid
}

type peerKey struct{}

// withPeer notes the PID of a control call's relay on its context.
func withPeer(ctx context.Context, pid int) context.Context {
	if pid == 0 {
		return ctx
	}
	return context.WithValue(ctx, peerKey{}, pid)
}

func peerOf(ctx context.Context) []int {
	if pid, ok := ctx.Value(peerKey{}).(int); ok {
		return []int{pid}
	}
	return nil
}
