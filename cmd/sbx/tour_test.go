package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// tourScript is the README's tour as one shell script: every ```sh block
// from "## A five-minute tour" up to "### Accounts, grants and events"
// (which needs an operator's database), then the "### Agents" part, with
// the default addresses replaced by the test stack's.
func tourScript(t *testing.T, readme, api, ssh, preview string) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("set -eux\n")
	blocks := 0
	for _, sec := range [][2]string{
		{"## A five-minute tour", "### Accounts, grants and events"},
		{"### Agents: MCP tools, streamed output, terminals", "### A repository cloned at create"},
	} {
		start := strings.Index(readme, sec[0])
		end := strings.Index(readme, sec[1])
		if start < 0 || end < start {
			t.Fatalf("README: section %q up to %q not found", sec[0], sec[1])
		}
		n := 0
		for _, part := range strings.Split(readme[start:end], "```sh\n")[1:] {
			code, _, ok := strings.Cut(part, "```")
			if !ok {
				t.Fatal("README: unterminated code block")
			}
			b.WriteString(code)
			n++
		}
		if n == 0 {
			t.Fatalf("README: no sh block in %q", sec[0])
		}
		blocks += n
	}
	if blocks < 6 {
		t.Fatalf("README tour has %d sh blocks, want the whole tour", blocks)
	}
	r := strings.NewReplacer("127.0.0.1:8080", api, "-p 2222", "-p "+ssh, "-P 2222", "-P "+ssh,
		"127.0.0.1:8081", preview, ":2222", ":"+ssh)
	return r.Replace(b.String())
}

// TestREADMETour runs the README's tour, as a newcomer would paste it,
// against a real sbx dev on a clean data dir in a fresh HOME: go install
// puts sbx on PATH, the token comes from ~/.sbx/dev/token.
func TestREADMETour(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	sshAddr, previewAddr := freeAddr(t), freeAddr(t)
	p := startDev(t, filepath.Join(home, ".sbx", "dev"), "", "--ssh-addr", sshAddr, "--preview-addr", previewAddr)
	script := tourScript(t, string(readme), strings.TrimPrefix(p.API, "http://"), strings.Split(sshAddr, ":")[1], previewAddr)

	goenv, err := exec.Command("go", "env", "GOMODCACHE", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	caches := strings.Fields(string(goenv))
	// A hang detector: the tour takes seconds.
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script)
	cmd.WaitDelay = 5 * time.Second
	cmd.Dir = "../.."
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SBX_") && !strings.HasPrefix(kv, "HOME=") && !strings.HasPrefix(kv, "GOPATH=") && !strings.HasPrefix(kv, "XDG_") {
			env = append(env, kv)
		}
	}
	// A fresh GOPATH, so go install lands in this test's HOME; the module
	// and build caches are shared to spare the network and a full rebuild.
	cmd.Env = append(env, "HOME="+home, "GOPATH="+filepath.Join(home, "go"), "GOMODCACHE="+caches[0], "GOCACHE="+caches[1])
	gitStatus := func() string {
		b, err := exec.Command("git", "-C", "../..", "status", "--porcelain").Output()
		if err != nil {
			t.Fatalf("git status: %v", err)
		}
		return string(b)
	}
	before := gitStatus()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("README tour failed: %v\n%s", err, out)
	}
	// The tour writes its files (the key) to HOME, not into the checkout.
	if after := gitStatus(); after != before {
		t.Errorf("the tour changed the checkout: git status was %q, is %q", before, after)
	}
	// The Agents part streams its command's output and exit from a live
	// sandbox (it once used the one the part before deleted, and ran
	// make test where there is no Makefile).
	for _, want := range []string{"hello", "it's $HOME, not expanded", "explicit_delete", "-rw-r--r--", "<!DOCTYPE HTML>",
		`"data":"step 3\n"`, `"exit_code":0`, `"ticket"`,
		// Env, secrets and idle settings (issue 30), and SSH by name.
		"NODE_ENV=test, NPM_TOKEN has 16 characters", `"idle_timeout_minutes": 1`, `"keep_awake_while_busy": false`,
		`"retention_days": 1`, "by name: NODE_ENV=test"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("tour output lacks %q:\n%s", want, out)
		}
	}
	// The shell's own trace (set -x, lines starting with +) shows the
	// variables the tour sets; what sbx prints must not.
	for _, line := range strings.Split(string(out), "\n") {
		if !strings.HasPrefix(line, "+") && strings.Contains(line, "sbx_at_") {
			t.Errorf("tour output shows token material: %q", line)
		}
	}
}
