package local

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"
)

// markerEnv is the environment variable every process of a local sandbox
// carries, set to the sandbox's directory: the embedded server puts it on
// every session, and sshd on its own and (SetEnv) on every session's.
// Process groups do not reach a server a user detached with setsid or a
// double fork, as dev servers are; the environment is inherited, so a scan
// of /proc finds the sandbox's whole process tree. A process that starts
// over with an empty environment (env -i) escapes it: this is a
// development provider, not a jail.
const markerEnv = "SBX_LOCAL_SANDBOX"

func marker(dir string) string { return markerEnv + "=" + dir }

// killRounds bounds endTree's scans: a process may fork between a scan
// and its kill, and its child is found by the next scan.
const killRounds = 100

// endTree SIGKILLs every process of this user that carries mark and waits
// until each has exited (its sockets, such as a listening port, closed),
// so the sandbox's ports are free when it returns.
func endTree(mark string) error {
	want := []byte(mark)
	killed := map[int]struct{}{}
	for range killRounds {
		pids, err := marked(want)
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return waitGone(killed)
		}
		for _, pid := range pids {
			if err := syscall.Kill(pid, syscall.SIGKILL); err == nil || errors.Is(err, syscall.ESRCH) {
				killed[pid] = struct{}{}
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
	return fmt.Errorf("processes carrying %s keep appearing after %d rounds of kills", mark, killRounds)
}

// marked lists the processes whose environment holds mark exactly. Other
// users' processes are unreadable and skipped; an exited process (a
// zombie) has no environment left and is not listed.
func marked(mark []byte) ([]int, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("scan processes: %w", err)
	}
	self := os.Getpid()
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue // gone, or not ours
		}
		if hasEnv(env, string(mark)) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// hasEnv reports whether a NUL-separated environment holds kv exactly.
func hasEnv(env []byte, kv string) bool {
	for e := range bytes.SplitSeq(env, []byte{0}) {
		if string(e) == kv {
			return true
		}
	}
	return false
}

// waitGone waits until every pid has exited: gone, or a zombie, which has
// closed its files already. Exiting after SIGKILL takes milliseconds; the
// bound only keeps a stuck process (in uninterruptible sleep on a dead
// disk) from hanging the caller.
func waitGone(pids map[int]struct{}) error {
	deadline := time.Now().Add(5 * time.Second)
	for pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("process %d did not exit after SIGKILL", pid)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	return nil
}

// alive reports whether any thread of pid has not exited yet. The
// thread group's leader is not enough: in a multithreaded process (a Go
// or Node server) the leader can be a zombie while its other threads are
// still exiting, and the open files (a listening port) go only with the
// last of them.
func alive(pid int) bool {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, t := range tasks {
		if running(dir + "/" + t.Name() + "/stat") {
			return true
		}
	}
	return false
}

// running reports whether the task whose stat file is path exists and is
// not a zombie or dead.
func running(path string) bool {
	stat, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses and may
	// itself hold spaces and parentheses.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 || i+2 >= len(stat) {
		return false
	}
	switch stat[i+2] {
	case 'Z', 'X':
		return false
	}
	return true
}
