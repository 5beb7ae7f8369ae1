package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// sshTokenView is the response as the API's schema (and so sbx) reads it.
type sshTokenView = apiclient.SSHToken

func TestSSHTokens(t *testing.T) {
	e := newEnv(t, "sqlite", true) // no jobs: the sandbox stays pending
	sb := e.createDev()
	path := "/api/v1/sandboxes/" + sb.ID + "/ssh_tokens"

	mint := func(body string) sshTokenView {
		t.Helper()
		before := time.Now()
		code, _, b := e.do("dev", "POST", path, strings.NewReader(body), "Content-Type", "application/json")
		if code != 201 {
			t.Fatalf("POST %s %q: %d %s, want 201", path, body, code, b)
		}
		var v sshTokenView
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		if v.ExpiresAt.Before(before) {
			t.Fatalf("expires_at %s is in the past", v.ExpiresAt)
		}
		return v
	}

	v := mint("") // no body: the defaults
	if v.Username != sb.ID || v.Host != "127.0.0.1" || v.Port != 2222 {
		t.Errorf("got username %q host %q port %d, want %q 127.0.0.1 2222", v.Username, v.Host, v.Port, sb.ID)
	}
	if want := "ssh -p 2222 " + sb.ID + "@127.0.0.1"; v.SshCommand != want {
		t.Errorf("ssh_command %q, want %q", v.SshCommand, want)
	}
	if d := time.Until(v.ExpiresAt); d < 59*time.Minute || d > 61*time.Minute {
		t.Errorf("default lifetime %s, want 60m", d)
	}
	signer, err := ssh.ParsePrivateKey([]byte(v.PrivateKeyPem))
	if err != nil {
		t.Fatalf("private_key_pem does not parse: %v", err)
	}
	if typ := signer.PublicKey().Type(); typ != ssh.KeyAlgoED25519 {
		t.Errorf("key type %s, want ed25519", typ)
	}
	cred, err := e.svc.Store.SSHCredential(context.Background(), ssh.FingerprintSHA256(signer.PublicKey()))
	if err != nil {
		t.Fatalf("stored credential by fingerprint: %v", err)
	}
	if cred.SandboxID != sb.ID || cred.AccountID == "" {
		t.Errorf("stored credential %+v, want sandbox %s", cred, sb.ID)
	}

	short := mint(`{"ttl_minutes":5}`)
	if d := time.Until(short.ExpiresAt); d < 4*time.Minute || d > 6*time.Minute {
		t.Errorf("ttl_minutes 5 gave lifetime %s", d)
	}
	if short.PrivateKeyPem == v.PrivateKeyPem {
		t.Error("two mints returned the same key")
	}

	for _, tc := range []struct {
		name, tok, path, body, code string
		status                      int
	}{
		{"ttl zero", "dev", path, `{"ttl_minutes":0}`, "invalid_request", 422},
		{"ttl above the cap", "dev", path, `{"ttl_minutes":61}`, "invalid_request", 422},
		{"unknown field", "dev", path, `{"ttl":5}`, "malformed_json", 400},
		{"other account", "other", path, `{}`, "sandbox_not_found", 404},
		{"no such sandbox", "dev", "/api/v1/sandboxes/sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa/ssh_tokens", `{}`, "sandbox_not_found", 404},
		{"no token", "", path, `{}`, "", 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, b := e.do(tc.tok, "POST", tc.path, strings.NewReader(tc.body), "Content-Type", "application/json")
			if code != tc.status || !strings.Contains(string(b), tc.code) {
				t.Errorf("got %d %s, want %d %s", code, b, tc.status, tc.code)
			}
			if strings.Contains(string(b), "PRIVATE KEY") {
				t.Errorf("refusal carries a key: %s", b)
			}
		})
	}

	// An ended sandbox gets no new credentials.
	if code, _, b := e.do("dev", "DELETE", "/api/v1/sandboxes/"+sb.ID, nil); code != 200 {
		t.Fatalf("delete: %d %s", code, b)
	}
	code, _, b := e.do("dev", "POST", path, strings.NewReader(`{}`), "Content-Type", "application/json")
	if code != 409 || !strings.Contains(string(b), "sandbox_state") {
		t.Errorf("after delete: %d %s, want 409 sandbox_state", code, b)
	}
}

// TestSSHCredentialDiesWithItsToken: an SSH credential minted with an
// agent token is refused once that token is revoked. Found from the
// outside: after `sbx admin token revoke`, a key minted with the token
// still opened new SSH sessions until its own expiry, up to an hour.
func TestSSHCredentialDiesWithItsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", false)
	e.addDevToken(t)
	id := e.createReady(t)
	code, _, b := e.do("dev2", "POST", "/api/v1/sandboxes/"+id+"/ssh_tokens", nil)
	var v sshTokenView
	if code != 201 || json.Unmarshal(b, &v) != nil {
		t.Fatalf("mint as dev2: %d %s", code, b)
	}
	signer, err := ssh.ParsePrivateKey([]byte(v.PrivateKeyPem))
	if err != nil {
		t.Fatal(err)
	}
	fp := ssh.FingerprintSHA256(signer.PublicKey())
	auth := sshauth.New(e.svc.Store, nil, nil)
	if _, err := auth.Authorize(t.Context(), id, fp); err != nil {
		t.Fatalf("credential of a live token: %v", err)
	}
	e.revokeDev2(t)
	if _, err := auth.Authorize(t.Context(), id, fp); !errors.Is(err, edgeapi.ErrSSHUnknownKey) {
		t.Fatalf("credential of a revoked token: got %v, want %v", err, edgeapi.ErrSSHUnknownKey)
	}
}
