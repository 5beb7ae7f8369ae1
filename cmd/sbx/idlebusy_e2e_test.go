package main

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// TestIdleKeptAwakeByWork: on `sbx dev --idle-timeout 3s`, a loop started
// with nohup over SSH (the session then closed) keeps its sandbox ready
// well past the idle timeout, and the same sandbox suspends once the loop
// ends. A twin with keep_awake_while_busy false, running the same loop,
// suspends while it runs: the loop, not something else, kept the first
// awake.
func TestIdleKeptAwakeByWork(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := startDev(t, filepath.Join(dir, "data"), "", "--idle-timeout", "3s")
	st := openStore(t, p.DataDir, "")
	busy := createReady(t, p)
	var twin sbView
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "keep_awake_while_busy": false}, &twin); code != 201 {
		t.Fatalf("create the twin: %d", code)
	}
	p.waitStatus(twin.ID, "ready", 2*time.Minute)

	const loopSeconds = 30
	loop := `nohup sh -c 'i=0; while [ $i -lt ` + strconv.Itoa(loopSeconds) + ` ]; do i=$((i+1)); sleep 1; done' >/dev/null 2>&1 &`
	for _, id := range []string{busy, twin.ID} {
		target := mint(t, p, id, dir)
		if out, errOut, code := runTool(t, "", "ssh", append(target.opts("-p"), target.dest(), loop)...); code != 0 {
			t.Fatalf("ssh nohup loop in %s: exit %d %q %q", id, code, out, errOut)
		}
	}
	started := time.Now()

	p.waitStatus(twin.ID, "suspended", 20*time.Second)
	if time.Since(started) > loopSeconds*time.Second {
		t.Fatal("the twin suspended only after the loop would have ended")
	}
	// Over three idle timeouts, with no connection and no mark.
	p.holdsStatus(busy, "ready", 10*time.Second)
	if time.Since(started) > (loopSeconds-1)*time.Second {
		t.Fatal("the hold outlasted the loop: the check proves nothing")
	}
	p.waitStatus(busy, "suspended", 30*time.Second)
	if time.Since(started) < loopSeconds*time.Second {
		t.Fatalf("suspended %s after the loop started, before it ended (%ds)", time.Since(started), loopSeconds)
	}
	if got := ledger(t, st, busy); got != "compute:idle_offload storage:open" {
		t.Fatalf("ledger of the busy sandbox: %q", got)
	}
}
