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
