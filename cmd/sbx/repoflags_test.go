package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCreateRepoFlags: --repo, --ref and --depth reach the create body,
// and the token comes from $SBX_REPO_TOKEN, a file, or stdin, never a
// flag's value, and is never printed.
func TestCreateRepoFlags(t *testing.T) {
	api, base := startFakeAPI(t, "")
	cliEnv(t, base)
	const tok = "ghp_REPO0TOKEN0FOR0THE0TEST"
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const url = "https://git.example.com/o/r.git"

	for _, tc := range []struct {
		name  string
		env   string // SBX_REPO_TOKEN
		stdin string
		args  []string
		want  map[string]any
	}{
		{"ref and depth", "", "", []string{"--repo", url, "--ref", "v1.2", "--depth", "1"},
			map[string]any{"url": url, "ref": "v1.2", "depth": 1.0}},
		{"token from the environment", tok, "", []string{"--repo", url},
			map[string]any{"url": url, "token": tok}},
		{"token file over the environment", "other", "", []string{"--repo", url, "--repo-token-file", tokFile},
			map[string]any{"url": url, "token": tok}},
		{"token on stdin", "", tok + "\n", []string{"--repo", url, "--repo-token-file", "-"},
			map[string]any{"url": url, "token": tok}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(repoTokenEnv, tc.env)
			code, out, errOut := runCLI(t, tc.stdin, append([]string{"create", "--wait", "0"}, tc.args...)...)
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			got := api.last(t)
			gb, _ := json.Marshal(got.Body["repo"])
			wb, _ := json.Marshal(tc.want)
			if got.Path != "/api/v1/sandboxes" || string(gb) != string(wb) {
				t.Errorf("sent %s with repo %s, want repo %s", got.Path, gb, wb)
			}
			if strings.Contains(out+errOut, tok) {
				t.Errorf("the token was printed: %q %q", out, errOut)
			}
		})
	}

	t.Setenv(repoTokenEnv, "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"ref without repo", []string{"--ref", "main"}, "--ref needs --repo"},
		{"depth without repo", []string{"--depth", "3"}, "--depth needs --repo"},
		{"token file without repo", []string{"--repo-token-file", tokFile}, "--repo-token-file needs --repo"},
		{"zero depth", []string{"--repo", url, "--depth", "0"}, "--depth 0"},
		{"empty token file", []string{"--repo", url, "--repo-token-file", empty}, "holds no token"},
		{"missing token file", []string{"--repo", url, "--repo-token-file", empty + ".gone"}, "no such file"},
		{"no token flag", []string{"--repo", url, "--repo-token", tok}, "unknown flag: --repo-token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api.mu.Lock()
			before := len(api.reqs)
			api.mu.Unlock()
			code, _, errOut := runCLI(t, "", append([]string{"create", "--wait", "0"}, tc.args...)...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d stderr %q; want 2 and %q", code, errOut, tc.want)
			}
			api.mu.Lock()
			after := len(api.reqs)
			api.mu.Unlock()
			if after != before {
				t.Errorf("%d requests reached the API, want none", after-before)
			}
		})
	}
}
