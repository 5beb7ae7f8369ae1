package main

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// hostKeyServer is an SSH server that shows its host key and admits
// no one: enough for sbx to pin a broker's key.
func hostKeyServer(t *testing.T) *net.TCPAddr {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &ssh.ServerConfig{PublicKeyCallback: func(ssh.ConnMetadata, ssh.PublicKey) (*ssh.Permissions, error) {
		return nil, errors.New("no one")
	}}
	cfg.AddHostKey(signer)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() { // owned by the test: ends when Cleanup closes ln
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _, _, _ = ssh.NewServerConn(c, cfg)
			c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}

// TestJSONOutputEverywhere: -o json is JSON for the commands that
// printed text whatever -o said (README: every command takes -o json).
func TestJSONOutputEverywhere(t *testing.T) {
	broker := hostKeyServer(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || !strings.HasSuffix(r.URL.Path, "/ssh_tokens") {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"username":%q,"host":"127.0.0.1","port":%d,"private_key_pem":"KEY","expires_at":"2030-01-01T00:00:00Z","ssh_command":"ssh"}`,
			fakeID, broker.Port)
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	keyFile := filepath.Join(t.TempDir(), "sbx.key")
	for _, c := range []struct {
		args []string
		want map[string]any // fields the JSON must hold
	}{
		{[]string{"version", "-o", "json"}, map[string]any{"version": version}},
		{[]string{"ssh-key", fakeID, keyFile, "-o", "json"}, map[string]any{"key_file": keyFile, "username": fakeID,
			"host": "127.0.0.1", "port": float64(broker.Port), "expires_at": "2030-01-01T00:00:00Z"}},
		{[]string{"ssh-config", fakeID, "--dir", t.TempDir(), "-o", "json"}, map[string]any{"alias": fakeID}},
	} {
		code, out, errOut := runCLI(t, "", c.args...)
		var got map[string]any
		if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
			t.Errorf("sbx %s: exit %d, stdout %q is not a JSON object (%v); stderr %q", strings.Join(c.args, " "), code, out, err, errOut)
			continue
		}
		for k, v := range c.want {
			if got[k] != v {
				t.Errorf("sbx %s: %s = %v, want %v (%s)", strings.Join(c.args, " "), k, got[k], v, out)
			}
		}
		if strings.Contains(out, "KEY") {
			t.Errorf("sbx %s: the private key is in the output: %s", strings.Join(c.args, " "), out)
		}
	}
}
