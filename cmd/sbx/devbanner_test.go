package main

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestDevTryText: the banner never tells people to put the dev token in
// SBX_TOKEN (which goes to any API named later, where the token file goes
// only to this stack), and exports only what differs from the CLI's
// defaults, so the commands it shows work as printed.
func TestDevTryText(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	t.Setenv("SBX_DATA_DIR", "")
	for _, tc := range []struct {
		api, dir string
		want     []string
		not      []string
	}{
		{"http://127.0.0.1:8080", filepath.Join(home, ".sbx", "dev"), []string{"sbx create && sbx list"}, []string{"export"}},
		{"http://127.0.0.1:18080", filepath.Join(home, ".sbx", "dev"), []string{"export SBX_API=http://127.0.0.1:18080\n"}, []string{"SBX_DATA_DIR"}},
		{"http://127.0.0.1:8080", "/tmp/my sbx", []string{"export SBX_DATA_DIR='/tmp/my sbx'\n"}, []string{"SBX_API"}},
	} {
		got := devTryText(tc.api, tc.dir, "sbx")
		for _, w := range tc.want {
			if !strings.Contains(got, w) {
				t.Errorf("devTryText(%s, %s) = %q, want %q in it", tc.api, tc.dir, got, w)
			}
		}
		for _, n := range append(tc.not, "SBX_TOKEN", "cat ") {
			if strings.Contains(got, n) {
				t.Errorf("devTryText(%s, %s) = %q, want no %q", tc.api, tc.dir, got, n)
			}
		}
	}
}

// TestDevBannerNamesThisBinary: when PATH finds no sbx (go run ./cmd/sbx
// dev, or a binary not yet installed) the banner's hints name the running
// binary by its path, so they work as printed; when PATH finds this very
// binary they say sbx.
func TestDevBannerNamesThisBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	notFound := func(string) (string, error) { return "", exec.ErrNotFound }
	if got := cliName(notFound); got != shellQuote(exe) || !filepath.IsAbs(exe) {
		t.Errorf("sbx not on PATH: named %q, want the running binary %q", got, exe)
	}
	other := filepath.Join(t.TempDir(), "sbx")
	if err := os.WriteFile(other, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := cliName(func(string) (string, error) { return other, nil }); got != shellQuote(exe) {
		t.Errorf("another sbx on PATH: named %q, want the running binary", got)
	}
	if got := cliName(func(string) (string, error) { return exe, nil }); got != "sbx" {
		t.Errorf("this binary on PATH: named %q, want sbx", got)
	}
	if got := devTryText("http://127.0.0.1:8080", filepath.Join(os.Getenv("HOME"), ".sbx", "dev"), "/tmp/go-build1/exe/sbx"); !strings.Contains(got, "/tmp/go-build1/exe/sbx create && /tmp/go-build1/exe/sbx list") {
		t.Errorf("banner %q does not use the binary's path", got)
	}
}

// TestSecondDevPointsAtFreePorts: a second sbx dev whose SSH port is
// taken says so and gives the free-ports command, which itself starts.
func TestSecondDevPointsAtFreePorts(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	out, err := exec.Command(sbxBinary(t), "dev", "--data-dir", t.TempDir(), "--api-addr", freeAddr(t), "--ssh-addr", taken.Addr().String(),
		"--preview-addr", freeAddr(t), "--egress-addr", freeAddr(t), "--metrics-addr", "").CombinedOutput()
	if err == nil {
		t.Fatalf("sbx dev on a taken SSH port started:\n%s", out)
	}
	for _, want := range []string{"address already in use", "Another sbx dev", freePortsExample} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The example as printed (its data dir made private) starts beside
	// the port's holder.
	args := strings.Fields(strings.ReplaceAll(strings.TrimPrefix(freePortsExample, "sbx "), "/tmp/sbx2", t.TempDir()))
	args[len(args)-1] = "" // --metrics-addr ''
	cmd := exec.Command(sbxBinary(t), args...)
	cmd.Env = append(os.Environ(), "SBX_DEV_TOKEN=")
	var log lockedBuffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	read := func() string {
		log.mu.Lock()
		defer log.mu.Unlock()
		return log.String()
	}
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(read(), "sbx dev is up"); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the free-ports example did not come up in 60 s:\n%s", read())
		}
	}
}
