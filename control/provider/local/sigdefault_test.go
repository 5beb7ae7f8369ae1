package local

import (
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestChildrenGetDefaultHangup: with SIGHUP and SIGINT ignored in this
// process (as under nohup, or as a script's background job), a child
// started after unignoreForChildren has neither ignored, so a hang-up or
// Ctrl-C reaches the sandbox's commands. Not parallel: while the two are
// ignored, every child this process starts inherits that.
func TestChildrenGetDefaultHangup(t *testing.T) {
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT)
	t.Cleanup(func() { signal.Reset(syscall.SIGHUP, syscall.SIGINT) })
	if got := childIgnored(t); got&0b11 != 0b11 {
		t.Fatalf("child's SigIgn %#x with both ignored here; want bits 0 and 1 set (the test cannot see the fault)", got)
	}
	unignoreForChildren()
	if got := childIgnored(t); got&0b11 != 0 {
		t.Fatalf("child's SigIgn %#x after unignoreForChildren; want SIGHUP and SIGINT at their default", got)
	}
}

// childIgnored is the ignored-signal mask of a child process, from its
// /proc status (bit n-1 for signal n).
func childIgnored(t *testing.T) uint64 {
	t.Helper()
	out, err := exec.Command("sh", "-c", "grep '^SigIgn:' /proc/$$/status").Output()
	if err != nil {
		t.Fatalf("read a child's SigIgn: %v", err)
	}
	f := strings.Fields(string(out))
	if len(f) != 2 {
		t.Fatalf("child's status line %q", out)
	}
	mask, err := strconv.ParseUint(f[1], 16, 64)
	if err != nil {
		t.Fatal(err)
	}
	return mask
}
