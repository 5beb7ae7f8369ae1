package local

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestResolveInit: the command sshd mode relays through is InitPath,
// else the sbx-init found beside the program or on PATH, else the host
// program's InitFallback; one sshd_config cannot hold is passed over.
func TestResolveInit(t *testing.T) {
	t.Parallel()
	// What os.Executable says under go run: the fallback sbx dev passes.
	goRun := []string{"/tmp/go-build1234567890/b001/exe/sbx", "sandbox-init"}
	tests := []struct {
		name     string
		initPath string
		found    string
		fallback []string
		want     []string
		wantErr  string
	}{
		{"flag wins over a found binary and the fallback", "/opt/sbx/sbx-init", "/usr/bin/sbx-init", goRun, []string{"/opt/sbx/sbx-init"}, ""},
		{"found binary wins over the fallback", "", "/usr/bin/sbx-init", goRun, []string{"/usr/bin/sbx-init"}, ""},
		{"fallback when nothing is found (go run)", "", "", goRun, goRun, ""},
		{"found binary sshd_config cannot name: fallback", "", "/home/me/my bin/sbx-init", goRun, goRun, ""},
		{"nothing at all", "", "", nil, nil, errNoInit.Error()},
		{"found binary unusable, no fallback", "", "/home/me/my bin/sbx-init", nil, nil, `"/home/me/my bin/sbx-init"`},
		{"both unusable: both named", "", "/a b/sbx-init", []string{"/c$d/sbx", "sandbox-init"}, nil, `"/c$d/sbx"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := Config{DataDir: "/tmp/x", Mode: ModeSSHD, InitPath: tt.initPath, InitFallback: tt.fallback}
			if err := cfg.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			got, err := resolveInit(cfg, func() string { return tt.found })
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("resolveInit = %q, %v; want an error naming %s", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("resolveInit = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

// TestResolveInitCopiesFallback: the provider's command is its own; the
// host's slice changing later does not change what sshd runs.
func TestResolveInitCopiesFallback(t *testing.T) {
	t.Parallel()
	fb := []string{"/usr/bin/sbx", "sandbox-init"}
	got, err := resolveInit(Config{InitFallback: fb}, func() string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	fb[1] = "changed"
	if got[1] != "sandbox-init" {
		t.Fatalf("resolveInit shares the caller's slice: %q", got)
	}
}

func TestValidateInitFallback(t *testing.T) {
	t.Parallel()
	for _, fb := range [][]string{{"/usr/bin/sbx", "sandbox-init; rm -rf /"}, {"/usr/bin/sbx", ""}, {"/usr/bin/sbx", "a b"}} {
		if err := (Config{DataDir: "/tmp/x", InitFallback: fb}).Validate(); err == nil {
			t.Errorf("InitFallback %q: Validate passed, want an error", fb)
		}
	}
	// The path is checked when it is needed, not here (resolveInit).
	if err := (Config{DataDir: "/tmp/x", InitFallback: []string{"/my dir/sbx", "sandbox-init"}}).Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

// TestFindInitOnPath: with none beside the running program, the first
// executable sbx-init on PATH is found; a file that is not executable is
// not.
func TestFindInitOnPath(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if executable(filepath.Join(filepath.Dir(exe), "sbx-init")) {
		t.Skip("an sbx-init lies beside the test binary")
	}
	plain, bin := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(plain, "sbx-init"), []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", plain)
	if got := findInit(); got != "" {
		t.Fatalf("findInit = %q with only a non-executable sbx-init on PATH", got)
	}
	want := filepath.Join(bin, "sbx-init")
	if err := os.WriteFile(want, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", plain+string(os.PathListSeparator)+bin)
	if got := findInit(); got != want {
		t.Fatalf("findInit = %q, want %q", got, want)
	}
}

// TestNewRefusesMissingInitPath: a named sbx-init that is not there
// stops the provider rather than leaving every service "unknown".
func TestNewRefusesMissingInitPath(t *testing.T) {
	t.Parallel()
	_, err := New(Config{DataDir: t.TempDir(), Mode: ModeSSHD, InitPath: filepath.Join(t.TempDir(), "sbx-init")})
	if err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Fatalf("New = %v, want an error for the missing InitPath", err)
	}
}
