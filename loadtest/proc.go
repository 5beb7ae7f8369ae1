package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The figures come from /proc, so the tool runs on Linux only.

// clockTicks is USER_HZ, which is 100 on every Linux we run on.
const clockTicks = 100

// procCPU is a process's user+system CPU time, with that of its reaped
// children when children is set.
func procCPU(pid int, children bool) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name, which may hold spaces.
	rest := b[bytes.LastIndexByte(b, ')')+2:]
	f := strings.Fields(string(rest))
	// f[0] is field 3 (state); utime is field 14, stime 15, cutime 16, cstime 17.
	sum := 0
	n := 2
	if children {
		n = 4
	}
	for i := 0; i < n; i++ {
		v, err := strconv.Atoi(f[11+i])
		if err != nil {
			return 0, fmt.Errorf("parse /proc/%d/stat: %w", pid, err)
		}
		sum += v
	}
	return time.Duration(sum) * time.Second / clockTicks, nil
}

// procPss is a process's proportional set size: its private memory plus
// its share of pages it shares, so summing over processes does not count
// shared libraries twice.
func procPss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Pss:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no Pss in /proc/%d/smaps_rollup", pid)
}

// descendants lists pid and every process below it.
func descendants(pid int) []int {
	children := map[int][]int{}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "stat"))
		if err != nil {
			continue
		}
		rest := b[bytes.LastIndexByte(b, ')')+2:]
		f := strings.Fields(string(rest))
		if len(f) < 2 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		me, _ := strconv.Atoi(filepath.Base(d))
		children[ppid] = append(children[ppid], me)
	}
	out := []int{pid}
	for i := 0; i < len(out); i++ {
		out = append(out, children[out[i]]...)
	}
	return out
}

// treePss sums Pss over pid and its descendants; processes that vanish
// while being read are skipped.
func treePss(pid int) int64 {
	var sum int64
	for _, p := range descendants(pid) {
		if v, err := procPss(p); err == nil {
			sum += v
		}
	}
	return sum
}

// findProcess returns the pid of the process whose command line contains
// every one of parts (the local provider does not expose its sshd's pid).
func findProcess(parts ...string) (int, error) {
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "cmdline"))
		if err != nil {
			continue
		}
		cmd := string(bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(cmd, p)
		}
		if ok {
			return strconv.Atoi(filepath.Base(d))
		}
	}
	return 0, fmt.Errorf("no process with %q in its command line", parts)
}
