package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/control/store"
)

// admin runs `sbx admin` against the same database as the dev process.
func (p *devProc) admin(args ...string) string {
	p.t.Helper()
	full := []string{"admin", "--data-dir", p.DataDir}
	if p.DBURL != "" {
		full = append(full, "--database-url", p.DBURL)
	}
	cmd := exec.Command(sbxBinary(p.t), append(full, args...)...)
	cmd.Env = append(os.Environ(), "SBX_DATABASE_URL=")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		p.t.Fatalf("sbx admin %v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// createAs posts a sandbox with tok and returns the status and problem code.
func (p *devProc) createAs(tok string, body map[string]any) (int, string) {
	p.t.Helper()
	saved := p.Token
	p.Token = tok
	defer func() { p.Token = saved }()
	var out struct {
		ID   string `json:"id"`
		Code string `json:"code"`
	}
	code := p.call("POST", "/api/v1/sandboxes", body, &out)
	return code, out.Code
}

// TestAdminCLI: an operator creates an account, a project and an agent
// token with `sbx admin`, and every later change (flag, platforms,
// limit, revocation) applies to the very next API request of a running
// control, with no database editing.
func TestAdminCLI(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		p := startDev(t, t.TempDir(), dbURL)
		out := p.admin("account", "create", "--name", "Hive", "--limit", "1", "--platforms", "linux", "--monthly-minutes", "600", "acct-hive")
		for _, want := range []string{"account acct-hive", "sandboxes_enabled: true", "sandbox_concurrent_limit: 1", "platforms: linux", "sandbox_monthly_minutes: 600"} {
			if !strings.Contains(out, want) {
				t.Fatalf("account create printed %q, want %q in it", out, want)
			}
		}
		project := p.admin("project", "create", "--account", "acct-hive", "--name", "tuist")
		tok := p.admin("token", "mint", "--account", "acct-hive", "--name", "hive-prod")
		if !strings.HasPrefix(tok, "sbx_at_") {
			t.Fatalf("token mint printed %q, want an agent token alone", tok)
		}
		grant := map[string]any{"profile": "tuist-linux-small", "grants": []map[string]any{{"project_id": project, "scopes": []string{"cache:read"}}}}
		if code, pc := p.createAs(tok, grant); code != 201 {
			t.Fatalf("create with the minted token and a grant on the new project: %d %s", code, pc)
		}
		if code, pc := p.createAs(tok, map[string]any{"profile": "tuist-linux-small"}); code != 429 || pc != "concurrency_limit" {
			t.Fatalf("second create at limit 1: %d %s", code, pc)
		}
		p.admin("account", "set", "--limit", "5", "acct-hive")
		if code, pc := p.createAs(tok, map[string]any{"profile": "tuist-linux-small"}); code != 201 {
			t.Fatalf("create after raising the limit: %d %s", code, pc)
		}
		p.admin("account", "set", "--platforms", "macos", "acct-hive")
		if code, pc := p.createAs(tok, map[string]any{"profile": "tuist-linux-small"}); code != 403 || pc != "platform_not_allowed" {
			t.Fatalf("linux create with a macos allowlist: %d %s", code, pc)
		}
		p.admin("account", "set", "--platforms", "none", "--enabled=false", "acct-hive")
		if code, pc := p.createAs(tok, map[string]any{"profile": "tuist-linux-small"}); code != 403 || pc != "feature_disabled" {
			t.Fatalf("create with the flag off: %d %s", code, pc)
		}
		shown := p.admin("account", "show", "acct-hive")
		if !strings.Contains(shown, "sandboxes_enabled: false") || !strings.Contains(shown, "sandbox_concurrent_limit: 5") || !strings.Contains(shown, "platforms: any") {
			t.Fatalf("account show after the changes: %q", shown)
		}
		if list := p.admin("account", "list"); !strings.Contains(list, "acct-hive") || !strings.Contains(list, "acct-dev") {
			t.Fatalf("account list: %q", list)
		}

		// Revocation by token ID, which the grant's audit entry names as
		// the caller.
		st := openStore(t, p.DataDir, dbURL)
		audit, err := st.Audit(context.Background(), store.AuditFilter{AccountID: "acct-hive"})
		if err != nil || len(audit) != 1 || !strings.HasPrefix(audit[0].Caller, "tok-") {
			t.Fatalf("audit of acct-hive: %+v, %v; want one grant entry naming the token", audit, err)
		}
		p.admin("token", "revoke", audit[0].Caller)
		if code, pc := p.createAs(tok, map[string]any{"profile": "tuist-linux-small"}); code != 401 || pc != "invalid_token" {
			t.Fatalf("create with a revoked token: %d %s", code, pc)
		}
	})
}
