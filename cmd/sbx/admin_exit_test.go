package main

import (
	"strings"
	"testing"
)

// TestAdminExitCodes: sbx admin keeps the CLI's exit codes (2 a usage
// mistake, 5 not found), says so in one line, and names what to do.
func TestAdminExitCodes(t *testing.T) {
	dir := t.TempDir()
	cliEnv(t, "http://127.0.0.1:1")
	openStore(t, dir, "") // creates and migrates sbx.db
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"token", "revoke", "tok-nope"}, 5, `no token with ID "tok-nope"`},
		{[]string{"account", "show", "nope"}, 5, "sbx admin account list"},
		{[]string{"account", "set", "--limit", "2", "nope"}, 5, "account nope: not found"},
		{[]string{"token", "mint", "--account", "nope"}, 5, "account nope: not found"},
		{[]string{"token", "revoke"}, 2, "want one token ID"},
		{[]string{"account", "create"}, 2, "missing account ID"},
		{[]string{"account", "create", "--limt", "3", "x"}, 2, "-limt"},
		{[]string{"account", "set", "acct-x"}, 2, "nothing to change"},
		{[]string{"project", "create", "--name", "app"}, 2, "--account and --name are required"},
		{[]string{"token", "mint", "--account", "a", "--kind", "root"}, 2, "want agent or project"},
	} {
		code, _, stderr := runCLI(t, "", append([]string{"admin", "--data-dir", dir}, tc.args...)...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("sbx admin %s: exit %d, stderr %q; want exit %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
		if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
			t.Errorf("sbx admin %s: %d lines on stderr, want one:\n%s", strings.Join(tc.args, " "), n+1, stderr)
		}
	}
}
