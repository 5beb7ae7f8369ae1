package main

import (
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/sandboxinit"
)

// TestSandboxInitCommand: "sbx sandbox-init ctl" is sbx-init's control
// command: it relays a call from stdin to the init's socket and the
// answer to stdout. Anything but ctl is a usage error.
func TestSandboxInitCommand(t *testing.T) {
	sup, err := sandboxinit.New(sandboxinit.Config{Workspace: t.TempDir(), Env: []string{"PATH=/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	defer sup.Close()
	if err := sup.Put(initproto.Service{Name: "idle", Command: "sleep 30"}); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "init.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sup.ServeListener(ctx, ln) }()
	defer func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	}()

	code, out, errOut := runCLI(t, `{"op":"list"}`+"\n", sandboxInitCmd, "ctl", "--socket", sock)
	var resp initproto.Response
	if code != 0 || json.Unmarshal([]byte(out), &resp) != nil || len(resp.Services) != 1 || resp.Services[0].Name != "idle" {
		t.Fatalf("sbx sandbox-init ctl: exit %d, stdout %q, stderr %q; want the init's list", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, "", sandboxInitCmd, "ctl", "--socket", filepath.Join(t.TempDir(), "none.sock")); code != 1 || !strings.Contains(errOut, "reach the init") {
		t.Errorf("ctl with no init: exit %d, stderr %q; want 1, saying so", code, errOut)
	}
	for _, args := range [][]string{{sandboxInitCmd}, {sandboxInitCmd, "serve"}} {
		if code, _, _ := runCLI(t, "", args...); code != 2 {
			t.Errorf("sbx %v: exit %d, want 2", args, code)
		}
	}
}
