package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// TestSSHBySandboxName (issue 30): the SSH user may be the sandbox's name
// wherever its ID works, through real OpenSSH and `sbx dev`'s broker: a
// plain `ssh NAME@edge`, the wake of a stopped sandbox named so (the
// broker wakes the ID control resolved, not the name), `sbx ssh NAME` and
// the Host entry `sbx ssh-config NAME` writes. The key's holder learns
// nothing from names: another of its account's names, an unknown name
// and another account's name are all refused alike.
func TestSSHBySandboxName(t *testing.T) {
	sshscenario.Require(t, "ssh", "openssh-client")
	p := startDev(t, t.TempDir(), "")
	var web, api sbView
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "name": "web"}, &web); code != 201 {
		t.Fatalf("create web: %d", code)
	}
	if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small", "name": "api"}, &api); code != 201 {
		t.Fatalf("create api: %d", code)
	}
	p.waitStatus(web.ID, "ready", 2*time.Minute)
	p.waitStatus(api.ID, "ready", 2*time.Minute)

	// Another account holds a sandbox named "theirs".
	p.admin("account", "create", "--name", "Other", "acct-other")
	otherTok := p.admin("token", "mint", "--account", "acct-other", "--name", "other")
	if code, pc := p.createAs(otherTok, map[string]any{"profile": "tuist-linux-small", "name": "theirs"}); code != 201 {
		t.Fatalf("create as the other account: %d %s", code, pc)
	}

	dir := t.TempDir()
	// Minted by name: the API resolves it and the credential names the ID.
	var tok sshToken
	if code := p.call("POST", "/api/v1/sandboxes/web/ssh_tokens", map[string]any{"ttl_minutes": 10}, &tok); code != 201 || tok.Username != web.ID {
		t.Fatalf("mint by name: status %d, username %q, want %s", code, tok.Username, web.ID)
	}
	tgt := sshTarget{id: web.ID, host: tok.Host, port: tok.Port, known: filepath.Join(dir, "known_hosts"),
		keyFile: writeKey(t, dir, "web.key", []byte(tok.PrivateKeyPem))}
	byName := func(user string, cmd string) (string, string, int) {
		return runTool(t, "", "ssh", append(tgt.opts("-p"), user+"@"+tgt.host, cmd)...)
	}
	if out, errOut, code := byName("web", "echo by-name"); code != 0 || out != "by-name\n" {
		t.Fatalf("ssh web@: exit %d out %q err %q", code, out, errOut)
	}
	if out, _, code := byName(web.ID, "echo by-id"); code != 0 || out != "by-id\n" {
		t.Fatalf("ssh ID@: exit %d out %q", code, out)
	}

	// web's key is good for web only, and says the same for every name
	// that is not web's.
	var refusals []string
	for _, user := range []string{"api", "nope", "theirs", api.ID} {
		_, errOut, code := byName(user, "true")
		if code != 255 || !strings.Contains(errOut, "Permission denied") {
			t.Fatalf("ssh %s@ with web's key: exit %d stderr %q; want 255 Permission denied", user, code, errOut)
		}
		refusals = append(refusals, strings.ReplaceAll(errOut, user+"@", "USER@"))
	}
	for i, r := range refusals[1:] {
		if r != refusals[0] {
			t.Errorf("refusal %d differs from the first:\n%q\n%q", i+1, r, refusals[0])
		}
	}

	// Stopped, it wakes for a connection by name.
	p.cli("stop", "web")
	p.waitStatus(web.ID, "suspended", 2*time.Minute)
	out, errOut, code := byName("web", "echo woke")
	if code != 0 || out != "woke\n" {
		t.Fatalf("ssh web@ to the stopped sandbox: exit %d out %q err %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "sbx: waking sandbox web") {
		t.Errorf("no wake banner on stderr: %q", errOut)
	}
	if sb := p.waitStatus(web.ID, "ready", time.Minute); sb.ID != web.ID {
		t.Fatalf("woke %+v", sb)
	}

	// sbx ssh NAME and the Host entry sbx ssh-config NAME writes.
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "SBX_API="+p.API, "SBX_TOKEN="+p.Token,
		"SBX_CONFIG_DIR="+filepath.Join(home, "sbx-config"))
	if out, errOut, code := runEnv(t, env, sbxBinary(t), "ssh", "api", "echo via-sbx-ssh"); code != 0 || out != "via-sbx-ssh\n" {
		t.Fatalf("sbx ssh api: exit %d out %q err %q", code, out, errOut)
	}
	alias, errOut, code := runEnv(t, env, sbxBinary(t), "ssh-config", "api")
	alias = strings.TrimSpace(alias)
	if code != 0 || alias == "" {
		t.Fatalf("sbx ssh-config api: exit %d out %q err %q", code, alias, errOut)
	}
	userCfg := filepath.Join(home, ".ssh", "config")
	if out, errOut, code := runEnv(t, env, "ssh", "-F", userCfg, "-o", "BatchMode=yes", alias, "echo via-alias"); code != 0 || out != "via-alias\n" {
		t.Fatalf("ssh %s (written for api): exit %d out %q err %q", alias, code, out, errOut)
	}
}
