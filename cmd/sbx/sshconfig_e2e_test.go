package main

import (
	"bytes"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
)

// runEnv runs name with env and returns stdout, stderr and the exit code.
func runEnv(t *testing.T, env []string, name string, args ...string) (string, string, int) {
	t.Helper()
	return runLimited(t, 2*time.Minute, env, "", name, args...)
}

// expireCredentials ends every SSH credential of the sandbox now, as
// their TTL running out would, without waiting the one-minute minimum.
func expireCredentials(t *testing.T, dataDir, id string) {
	t.Helper()
	db, err := sql.Open("sqlite", filepath.Join(dataDir, "sbx.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	res, err := db.Exec(`UPDATE ssh_credentials SET expires_at = ? WHERE sandbox_id = ?`, time.Now().Add(-time.Minute).UnixMicro(), id)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		t.Fatalf("no credentials of %s to expire", id)
	}
}

// TestSSHConfigNeverStale: the Host entry sbx ssh-config writes still
// connects through real OpenSSH after the credential it was written with
// has expired, because each connection mints a fresh one. Then a fresh
// stack (new data dir, so a new broker key) on the same SSH port is
// refused with how to forget the old key, and works after doing so.
func TestSSHConfigNeverStale(t *testing.T) {
	sshscenario.Require(t, "ssh", "openssh-client")
	sshAddr := freeAddr(t)
	dataDir := t.TempDir()
	p := startDev(t, dataDir, "", "--ssh-addr", sshAddr)
	id := createReady(t, p)
	home := t.TempDir()
	cfgDir := filepath.Join(home, "sbx-config")
	env := append(os.Environ(), "HOME="+home, "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+cfgDir)
	sshDir := filepath.Join(home, ".ssh", "sbx")
	userCfg := filepath.Join(home, ".ssh", "config")

	out, errOut, code := runEnv(t, env, sbxBinary(t), "ssh-config", id)
	if code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("sbx ssh-config: exit %d out %q err %q", code, out, errOut)
	}
	// The token is only in this shell's SBX_TOKEN, which an editor
	// started from a launcher lacks: ssh-config says how to save it, and
	// once saved, connections without SBX_TOKEN get in (below).
	save := "printenv SBX_TOKEN | sbx login --api " + p.API
	if !strings.Contains(errOut, save) {
		t.Fatalf("sbx ssh-config with only SBX_TOKEN: stderr %q; want the note %q", errOut, save)
	}
	if _, e, c := runEnv(t, env, "sh", "-c", strings.Replace(save, "sbx", shellQuote(sbxBinary(t)), 1)); c != 0 {
		t.Fatalf("%s: exit %d %s", save, c, e)
	}
	editorEnv := slices.DeleteFunc(slices.Clone(env), func(kv string) bool { return strings.HasPrefix(kv, "SBX_TOKEN=") })
	if _, errOut, code = runEnv(t, env, sbxBinary(t), "ssh-config", id); code != 0 || strings.Contains(errOut, "SBX_TOKEN") {
		t.Fatalf("sbx ssh-config with a saved token: exit %d stderr %q; want no note", code, errOut)
	}
	keyFile := filepath.Join(sshDir, id+".key")
	firstKey, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	expireCredentials(t, dataDir, id)
	// As the TTL running out would, time passed since the key was written
	// (the hook shares a key written in the last 30 s).
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(keyFile, old, old); err != nil {
		t.Fatal(err)
	}

	// The written key alone is refused now: it really expired.
	stale := filepath.Join(home, "stale.key")
	if err := os.WriteFile(stale, firstKey, 0o600); err != nil {
		t.Fatal(err)
	}
	_, errOut, code = runEnv(t, env, "ssh", "-F", "/dev/null", "-i", stale, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
		"-o", "UserKnownHostsFile="+filepath.Join(cfgDir, "known_hosts"), "-o", "StrictHostKeyChecking=yes",
		"-p", strings.Split(sshAddr, ":")[1], id+"@127.0.0.1", "true")
	if code != 255 || !strings.Contains(errOut, "expired") {
		t.Fatalf("stale key: exit %d stderr %q; want 255 and 'expired'", code, errOut)
	}

	// What VS Code does: ssh <alias> with the user's config, in an
	// environment without the shell's SBX_TOKEN.
	out, errOut, code = runEnv(t, editorEnv, "ssh", "-F", userCfg, "-o", "BatchMode=yes", id, "echo via-alias")
	if code != 0 || out != "via-alias\n" {
		t.Fatalf("ssh %s after expiry: exit %d stdout %q stderr %q", id, code, out, errOut)
	}
	if now, _ := os.ReadFile(keyFile); bytes.Equal(now, firstKey) {
		t.Error("the key file was not refreshed by the connection")
	}

	// A fresh stack on the same SSH port has a new broker key.
	p.stop()
	p2 := startDev(t, t.TempDir(), "", "--ssh-addr", sshAddr)
	id2 := createReady(t, p2)
	env2 := append(os.Environ(), "HOME="+home, "SBX_API="+p2.API, "SBX_TOKEN="+p2.Token, "SBX_CONFIG_DIR="+cfgDir)
	_, errOut, code = runEnv(t, env2, sbxBinary(t), "ssh", id2, "-o", "BatchMode=yes", "true")
	if code != 1 || !strings.Contains(errOut, "different host key") || !strings.Contains(errOut, "ssh-keygen -R") {
		t.Fatalf("sbx ssh after a fresh stack: exit %d stderr %q; want 1 and how to forget the key", code, errOut)
	}
	// Do what the message says.
	fix := errOut[strings.Index(errOut, "ssh-keygen -R"):]
	fix = fix[:strings.Index(fix, ". ")]
	if _, e, c := runEnv(t, env2, "sh", "-c", fix); c != 0 {
		t.Fatalf("%s: exit %d %s", fix, c, e)
	}
	out, errOut, code = runEnv(t, env2, sbxBinary(t), "ssh", id2, "-o", "BatchMode=yes", "echo fresh-stack")
	if code != 0 || out != "fresh-stack\n" {
		t.Fatalf("sbx ssh after forgetting the old key: exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// TestSSHConfigConcurrentConnections: connections through the Host entry
// opened at once (VS Code reconnecting several windows) all get in. Each
// runs the Match exec hook; a hook that replaced the key file while
// another ssh had read its public half but not yet signed made that one
// fail ("private key ... contents do not match public").
func TestSSHConfigConcurrentConnections(t *testing.T) {
	sshscenario.Require(t, "ssh", "openssh-client")
	p := startDev(t, t.TempDir(), "")
	id := createReady(t, p)
	home := t.TempDir()
	env := append(os.Environ(), "HOME="+home, "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(home, "sbx-config"))
	if out, errOut, code := runEnv(t, env, sbxBinary(t), "ssh-config", id); code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("sbx ssh-config: exit %d out %q err %q", code, out, errOut)
	}
	userCfg := filepath.Join(home, ".ssh", "config")
	const n = 8
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		out, errOut string
		err         error
	}
	results := make(chan result, n)
	for i := 0; i < n; i++ {
		cmd := exec.CommandContext(ctx, "ssh", "-F", userCfg, "-o", "BatchMode=yes", id, "echo in")
		cmd.Env = env
		go func() {
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			results <- result{out.String(), errb.String(), err}
		}()
	}
	for i := 0; i < n; i++ {
		r := <-results
		if r.err != nil || r.out != "in\n" {
			t.Errorf("ssh %s: %v stdout %q stderr %q", id, r.err, r.out, r.errOut)
		}
	}
}
