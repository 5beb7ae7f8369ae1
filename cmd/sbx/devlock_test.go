package main

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestDevDataDirLock: a second sbx dev on a data dir in use refuses at
// once, naming the first's PID, and touches nothing; once the first is
// killed (SIGKILL: no cleanup ran, the lock file stays) the data dir is
// free again.
func TestDevDataDirLock(t *testing.T) {
	dataDir := t.TempDir()
	first := startDev(t, dataDir, "")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	second := exec.CommandContext(ctx, sbxBinary(t), "dev", "--data-dir", dataDir, "--api-addr", freeAddr(t),
		"--metrics-addr", "", "--ssh-addr", freeAddr(t), "--preview-addr", freeAddr(t))
	out, err := second.CombinedOutput()
	pid := strconv.Itoa(first.cmd.Process.Pid)
	if err == nil || !strings.Contains(string(out), "pid "+pid) || !strings.Contains(string(out), dataDir) {
		t.Fatalf("second sbx dev on %s: %v\n%s\nwant a refusal naming pid %s", dataDir, err, out, pid)
	}
	if code := first.call("GET", "/api/v1/sandboxes", nil, nil); code != 200 {
		t.Fatalf("the first sbx dev answers %d after the second was refused", code)
	}

	first.crash()
	again := startDev(t, dataDir, "") // fails the test if the stale lock blocks
	again.stop()
}

// TestDevJobsInstance: a data dir's job client keeps its name across
// restarts (however the dir is spelt), another dir's differs, and both
// fit River's limit on a client ID.
func TestDevJobsInstance(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	name := func(d string) string {
		t.Helper()
		s, err := devJobsInstance(d)
		if err != nil {
			t.Fatalf("devJobsInstance(%q): %v", d, err)
		}
		if len(s) > 100 {
			t.Errorf("devJobsInstance(%q) = %q: %d bytes, want at most 100", d, s, len(s))
		}
		return s
	}
	if a, b := name(dir), name("."); a != b {
		t.Errorf("devJobsInstance: %q for %s, %q for . (the same dir)", a, dir, b)
	}
	if a, b := name(dir), name(t.TempDir()); a == b {
		t.Errorf("devJobsInstance: %q for two data dirs, want them apart", a)
	}
}
