package main

import (
	"encoding/json"
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

// TestAdminOutputJSON: sbx admin takes -o json like every other command,
// before or after the noun and verb, and refuses a format it lacks.
func TestAdminOutputJSON(t *testing.T) {
	dir := t.TempDir()
	cliEnv(t, "http://127.0.0.1:1")
	openStore(t, dir, "")
	admin := func(args ...string) (int, string, string) {
		return runCLI(t, "", append([]string{"admin", "--data-dir", dir}, args...)...)
	}
	if code, _, stderr := admin("account", "create", "--limit", "3", "acct-j", "-o", "json"); code != 0 {
		t.Fatalf("account create -o json: exit %d, %s", code, stderr)
	}
	for _, args := range [][]string{
		{"account", "show", "acct-j", "-o", "json"},
		{"-o", "json", "account", "show", "acct-j"},
		{"account", "show", "--output=json", "acct-j"},
	} {
		code, out, stderr := admin(args...)
		var got accountJSON
		if code != 0 || json.Unmarshal([]byte(out), &got) != nil || got.ID != "acct-j" || got.ConcurrentLimit != 3 {
			t.Errorf("sbx admin %s: exit %d, stdout %q, stderr %q; want the account as JSON", strings.Join(args, " "), code, out, stderr)
		}
	}
	// The per-account snapshot quota (issue 30): set, shown, cleared.
	if code, out, stderr := admin("account", "set", "--snapshot-limit", "5", "acct-j"); code != 0 || !strings.Contains(out, "snapshot_limit: 5") {
		t.Errorf("account set --snapshot-limit 5: exit %d, %q %q", code, out, stderr)
	}
	if code, out, _ := admin("account", "show", "acct-j", "-o", "json"); code != 0 || !strings.Contains(out, `"snapshot_limit": 5`) {
		t.Errorf("account show after --snapshot-limit 5: %q", out)
	}
	if code, out, _ := admin("account", "set", "--snapshot-limit", "0", "acct-j"); code != 0 || !strings.Contains(out, "snapshot_limit: default") {
		t.Errorf("account set --snapshot-limit 0: exit %d, %q", code, out)
	}
	if code, _, stderr := admin("account", "set", "--snapshot-limit", "-1", "acct-j"); code == 0 || !strings.Contains(stderr, "--snapshot-limit") {
		t.Errorf("account set --snapshot-limit -1: exit %d, %q; want a refusal naming the flag", code, stderr)
	}
	code, out, _ := admin("account", "list", "-o", "json")
	var list []accountJSON
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) == 0 {
		t.Errorf("account list -o json: exit %d, %q; want a JSON array", code, out)
	}
	code, out, _ = admin("token", "mint", "--account", "acct-j", "-o", "json")
	var tok struct{ ID, Token string }
	if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || !strings.HasPrefix(tok.ID, "tok-") || !strings.HasPrefix(tok.Token, "sbx_at_") {
		t.Errorf("token mint -o json: exit %d, %q; want id and token", code, out)
	}
	if code, _, stderr := admin("account", "list", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "want table or json") {
		t.Errorf("account list -o yaml: exit %d, %q; want a usage error", code, stderr)
	}
	if code, _, stderr := admin("--bogus", "account", "list"); code != 2 || strings.Count(stderr, "\n") != 1 {
		t.Errorf("admin --bogus: exit %d, %q; want exit 2 and one line", code, stderr)
	}
}
