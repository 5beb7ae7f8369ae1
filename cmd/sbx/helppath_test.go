package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHelpShowsNoHomeFolder: defaults under the home folder show as ~/...
// in every --help (sbx dev's too), never as the person's own path.
func TestHelpShowsNoHomeFolder(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home-of-alice")
	cliEnv(t, "http://127.0.0.1:1")
	t.Setenv("HOME", home)
	for _, p := range commandPaths() {
		if p[0] == "dev" || p[0] == "admin" {
			continue // own flag sets, below
		}
		args := append(append([]string(nil), p...), "--help")
		_, out, errOut := runCLI(t, "", args...)
		if strings.Contains(out+errOut, "home-of-alice") {
			t.Errorf("sbx %s shows the home folder:\n%s%s", strings.Join(args, " "), out, errOut)
		}
	}
	if _, out, _ := runCLI(t, "", "ssh-config", "--help"); !strings.Contains(out, `"~/.ssh/sbx"`) {
		t.Errorf("sbx ssh-config --help does not show its default as ~/.ssh/sbx:\n%s", out)
	}
	cmd := execCommand(t, "dev", "--help")
	cmd.Env = append(os.Environ(), "HOME="+home, "SBX_DATA_DIR=")
	out, _ := cmd.CombinedOutput()
	if strings.Contains(string(out), "home-of-alice") || !strings.Contains(string(out), `"~/.sbx/dev"`) {
		t.Errorf("sbx dev --help: want the data dir default as ~/.sbx/dev, not the home folder:\n%s", out)
	}
}

// TestDevFlagMistakeIsOneLine: a mistyped sbx dev flag is one line with
// exit 2, not the flag package's error followed by every flag.
func TestDevFlagMistakeIsOneLine(t *testing.T) {
	cmd := execCommand(t, "dev", "--api-adr", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), "SBX_DATA_DIR="+t.TempDir())
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 2 || strings.Count(string(out), "\n") != 1 || !strings.Contains(string(out), "-api-adr") {
		t.Errorf("sbx dev --api-adr: exit %d, want 2 and one line naming the flag:\n%s", code, out)
	}
}

// TestStdFlagHelpHasExamples: sbx dev and sbx admin, which parse their
// own flags, show examples in --help like every other command (README).
func TestStdFlagHelpHasExamples(t *testing.T) {
	for _, args := range [][]string{{"dev", "--help"}, {"admin", "--help"}} {
		cmd := execCommand(t, args...)
		cmd.Env = append(os.Environ(), "SBX_DATA_DIR="+t.TempDir())
		out, _ := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != 0 || !strings.Contains(string(out), "Examples:\n  sbx "+args[0]) {
			t.Errorf("sbx %s: exit %d, want examples:\n%s", strings.Join(args, " "), code, out)
		}
	}
}
