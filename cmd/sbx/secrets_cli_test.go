package main

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsEnvWorkdirCLI: on sbx dev (which keeps a secrets key of its
// own), `sbx secrets set` reads the value from stdin and `list` shows the
// name only; `sbx create --env --secret --secret-file` delivers them and
// `sbx exec -w` runs in a folder of the workspace; a -w outside it is
// refused.
func TestSecretsEnvWorkdirCLI(t *testing.T) {
	dir := t.TempDir()
	p := startDev(t, filepath.Join(dir, "data"), "")
	t.Setenv("HOME", dir)
	t.Setenv("SBX_CONFIG_DIR", filepath.Join(dir, "config"))
	t.Setenv("SBX_API", p.API)
	t.Setenv("SBX_TOKEN", p.Token)
	const value = "cli-s3cret-value-91"
	if code, out, errOut := runCLI(t, value+"\n", "secrets", "set", "NPM_TOKEN"); code != 0 || strings.Contains(out+errOut, value) {
		t.Fatalf("secrets set: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "line one\nline two\n", "secrets", "set", "DEPLOY_KEY"); code != 0 {
		t.Fatalf("secrets set DEPLOY_KEY: %d %q %q", code, out, errOut)
	}
	code, out, errOut := runCLI(t, "", "secrets", "list")
	if code != 0 || !strings.Contains(out, "NPM_TOKEN") || strings.Contains(out, value) {
		t.Fatalf("secrets list: %d %q %q", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "create", "-o", "id", "--env", "STAGE=cli test", "--secret", "NPM_TOKEN", "--secret-file", "DEPLOY_KEY")
	if code != 0 {
		t.Fatalf("create: %d %q %q", code, out, errOut)
	}
	id := strings.TrimSpace(out)
	if code, out, errOut := runCLI(t, "", "exec", id, `mkdir -p app/src && printf '%s|%s|' "$STAGE" "$NPM_TOKEN" && cat "$HOME/.sbx/secrets/DEPLOY_KEY"`); code != 0 || out != "cli test|"+value+"|line one\nline two" {
		t.Fatalf("exec sees: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "", "exec", "-w", "app/src", id, "--", "sh", "-c", `basename "$PWD"`); code != 0 || out != "src\n" {
		t.Fatalf("exec -w app/src: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "", "exec", "-w", "../..", id, "--", "pwd"); code == 0 || !strings.Contains(errOut, "cwd") {
		t.Fatalf("exec -w ../..: %d %q %q, want a refusal naming cwd", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, "", "secrets", "rm", "NPM_TOKEN"); code != 0 {
		t.Fatalf("secrets rm: %d %q %q", code, out, errOut)
	}
	if code, _, _ := runCLI(t, "", "secrets", "rm", "NPM_TOKEN"); code == 0 {
		t.Fatal("secrets rm of a deleted secret succeeded")
	}
}
