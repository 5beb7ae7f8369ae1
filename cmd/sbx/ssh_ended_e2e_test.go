package main

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestSSHSessionToldSandboxEnded: a session open on a sandbox that is
// deleted is told why it ends (control's sandbox invalidation reaches the
// SSH broker), not just "closed by remote host"; a new connection right
// after, inside the broker's route cache, is told the sandbox ended.
func TestSSHSessionToldSandboxEnded(t *testing.T) {
	p := startDev(t, t.TempDir(), "")
	id := createReady(t, p)
	tgt := mint(t, p, id, t.TempDir())

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ssh", append(tgt.opts("-p"), tgt.dest(), "echo open; sleep 60")...)
	var stderr sshscenario.SyncBuffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Wait() }()
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != "open\n" {
		t.Fatalf("session: read %q %v, want open; stderr %q", line, err, stderr.String())
	}

	if code := p.call("DELETE", "/api/v1/sandboxes/"+id, nil, nil); code != 200 {
		t.Fatalf("delete: status %d", code)
	}
	err = cmd.Wait()
	if ctx.Err() != nil {
		t.Fatalf("the session outlived its sandbox; stderr %q", stderr.String())
	}
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 255 {
		t.Fatalf("session ended with %v, want ssh's 255", err)
	}
	if !strings.Contains(stderr.String(), "sandbox "+id+" has ended") {
		t.Fatalf("session stderr %q, want the sandbox's end explained", stderr.String())
	}

	_, errOut, code := runTool(t, "", "ssh", append(tgt.opts("-p"), tgt.dest(), "true")...)
	if code != 255 || !strings.Contains(errOut, "sandbox "+id+" has ended") || strings.Contains(errOut, "try again") {
		t.Fatalf("new connection: code %d stderr %q, want 255 and the sandbox's end explained", code, errOut)
	}
}
