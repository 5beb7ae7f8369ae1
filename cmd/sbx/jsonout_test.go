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

// TestJSONOutputRmAndLogs: `files rm` printed nothing and `services logs`
// printed text whatever -o said; under -o json, rm answers an object and
// logs answers JSON lines, one {"text"} (plus "at" with -f) a line.
func TestJSONOutputRmAndLogs(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "DELETE" && strings.Contains(r.URL.Path, "/files/"):
			w.WriteHeader(http.StatusNoContent)
		case strings.HasSuffix(r.URL.Path, "/logs") && r.URL.Query().Get("follow") == "true":
			w.Header().Set("Content-Type", "text/event-stream")
			fmt.Fprint(w, "event: line\ndata: {\"at\":\"2030-01-01T00:00:00Z\",\"text\":\"listening <on> 3000\"}\n\n")
		case strings.HasSuffix(r.URL.Path, "/logs"):
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "sbx-init: starting web\nlistening \"here\"\n")
		default:
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	for _, c := range []struct {
		args []string
		want []map[string]any // one object per line
	}{
		{[]string{"files", "rm", fakeID, "build/out.txt", "-o", "json"},
			[]map[string]any{{"removed": "build/out.txt", "recursive": false}}},
		{[]string{"files", "rm", "-r", fakeID, "build", "-o", "json"},
			[]map[string]any{{"removed": "build", "recursive": true}}},
		{[]string{"services", "logs", fakeID, "web", "-o", "json"},
			[]map[string]any{{"text": "sbx-init: starting web"}, {"text": `listening "here"`}}},
		{[]string{"services", "logs", fakeID, "web", "-f", "-o", "json"},
			[]map[string]any{{"at": "2030-01-01T00:00:00Z", "text": "listening <on> 3000"}}},
	} {
		name := strings.Join(c.args, " ")
		code, out, errOut := runCLI(t, "", c.args...)
		if code != 0 {
			t.Errorf("sbx %s: exit %d, stderr %q", name, code, errOut)
			continue
		}
		dec := json.NewDecoder(strings.NewReader(out))
		var got []map[string]any
		for dec.More() {
			var m map[string]any
			if err := dec.Decode(&m); err != nil {
				t.Fatalf("sbx %s: stdout %q is not JSON objects: %v", name, out, err)
			}
			got = append(got, m)
		}
		if len(got) != len(c.want) {
			t.Errorf("sbx %s: %d objects, want %d: %q", name, len(got), len(c.want), out)
			continue
		}
		for i, w := range c.want {
			if len(got[i]) != len(w) {
				t.Errorf("sbx %s: object %d = %v, want %v", name, i, got[i], w)
			}
			for k, v := range w {
				if got[i][k] != v {
					t.Errorf("sbx %s: object %d: %s = %v, want %v", name, i, k, got[i][k], v)
				}
			}
		}
		// JSON lines: each object on a line of its own.
		if strings.Count(strings.TrimSpace(out), "\n") != len(c.want)-1 && c.args[0] == "services" {
			t.Errorf("sbx %s: want one object a line, got %q", name, out)
		}
	}
}
