package main

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// markerEnv is set, to the VM's directory, in every process `tart exec`
// starts: the guest's process tree is those processes and their
// descendants (sshd's sessions drop the environment but are sshd's
// children). A VM that stops ends them all, as powering off a guest does.
const markerEnv = "FAKETART_VM"

// endGuest SIGKILLs the guest's processes until none is left.
func endGuest(dir string) error {
	mark := []byte(markerEnv + "=" + dir)
	for range 100 {
		pids := guestPIDs(mark, dir)
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		deadline := time.Now().Add(2 * time.Second)
		for _, pid := range pids {
			for alive(pid) && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	return fmt.Errorf("the guest processes of %s keep appearing", dir)
}

// ofGuest reports whether process pid is the guest's: it carries the
// marker, or its command line or working directory is inside the VM's
// directory. The second catches daemons such as sshd, whose process title
// overwrites the memory /proc/<pid>/environ reads.
func ofGuest(pid string, mark []byte, dir string) bool {
	if env, err := os.ReadFile("/proc/" + pid + "/environ"); err == nil {
		for kv := range bytes.SplitSeq(env, []byte{0}) {
			if bytes.Equal(kv, mark) {
				return true
			}
		}
	}
	if cmd, err := os.ReadFile("/proc/" + pid + "/cmdline"); err == nil && bytes.Contains(cmd, []byte(dir+"/")) {
		return true
	}
	cwd, err := os.Readlink("/proc/" + pid + "/cwd")
	return err == nil && (cwd == dir || strings.HasPrefix(cwd, dir+"/"))
}

// guestPIDs lists the processes carrying mark and their descendants.
func guestPIDs(mark []byte, dir string) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	parent := map[int]int{}
	in := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		if stat, err := os.ReadFile("/proc/" + e.Name() + "/stat"); err == nil {
			if i := bytes.LastIndexByte(stat, ')'); i > 0 {
				f := strings.Fields(string(stat[i+1:]))
				if len(f) > 1 && f[0] != "Z" {
					parent[pid], _ = strconv.Atoi(f[1])
				}
			}
		}
		in[pid] = ofGuest(e.Name(), mark, dir)
	}
	var out []int
	for pid := range parent {
		for p, n := pid, 0; p > 1 && n < 64; p, n = parent[p], n+1 {
			if in[p] {
				out = append(out, pid)
				break
			}
		}
	}
	return out
}
