package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSSHEntriesGoWithTheSandbox: sbx destroy removes the sandbox's
// ssh-config entry and key, and ssh-config --prune removes those of
// sandboxes the API no longer has, keeping live ones and other APIs'.
func TestSSHEntriesGoWithTheSandbox(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		id := r.URL.Path[strings.LastIndex(r.URL.Path, "/")+1:]
		switch {
		case id == "sbx-dead":
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"type":"about:blank","title":"Not Found","status":404,"code":"not_found","detail":"no sandbox with that id"}`)
		default:
			status := map[bool]string{true: "terminated", false: "ready"}[id == "sbx-ended" || r.Method == "DELETE"]
			_, _ = io.WriteString(w, `{"id":"`+id+`","status":"`+status+`","profile":"p","platform":"linux","deadline_at":"2030-01-01T00:00:00Z"}`)
		}
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	dir := defaultSSHConfigDir()
	tok := func(id string) sshToken {
		return sshToken{Username: id, Host: "127.0.0.1", Port: 2222, PrivateKeyPem: "KEY", ExpiresAt: time.Now()}
	}
	for _, id := range []string{"sbx-live", "sbx-dead", "sbx-ended", fakeID} {
		if _, err := writeSSHConfig(dir, srv.URL, tok(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := writeSSHConfig(dir, "http://127.0.0.1:1", tok("sbx-elsewhere")); err != nil {
		t.Fatal(err)
	}
	exists := func(id string) bool {
		_, err1 := os.Stat(filepath.Join(dir, id+".conf"))
		_, err2 := os.Stat(filepath.Join(dir, id+".key"))
		return err1 == nil || err2 == nil
	}
	if code, _, errOut := runCLI(t, "", "destroy", fakeID); code != 0 || exists(fakeID) {
		t.Errorf("sbx destroy: exit %d (%s); entry left: %v", code, errOut, exists(fakeID))
	}
	code, out, errOut := runCLI(t, "", "ssh-config", "--prune")
	if code != 0 || strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != "sbx-dead sbx-ended" {
		t.Errorf("sbx ssh-config --prune: exit %d, printed %q (%s), want sbx-dead sbx-ended", code, out, errOut)
	}
	for id, want := range map[string]bool{"sbx-live": true, "sbx-elsewhere": true, "sbx-dead": false, "sbx-ended": false} {
		if exists(id) != want {
			t.Errorf("after --prune, %s's entry exists: %v, want %v", id, exists(id), want)
		}
	}
}

// TestLocalhostSharesTheSavedToken: a token saved for 127.0.0.1:PORT is
// used for localhost:PORT (sent to 127.0.0.1), and never for another port.
func TestLocalhostSharesTheSavedToken(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	t.Setenv("SBX_TOKEN", "")
	key, _ := apiKey(srv.URL)
	if err := writeConfig(cliConfig{Tokens: map[string]string{key: fakeToken}}); err != nil {
		t.Fatal(err)
	}
	port := srv.URL[strings.LastIndex(srv.URL, ":")+1:]
	t.Setenv("SBX_API", "http://localhost:"+port)
	if code, _, errOut := runCLI(t, "", "get", fakeID); code != 0 || api.last(t).Auth != "Bearer "+fakeToken {
		t.Errorf("sbx get via localhost: exit %d (%s), want the token saved for 127.0.0.1", code, errOut)
	}
	t.Setenv("SBX_API", "http://localhost:1")
	if code, _, errOut := runCLI(t, "", "get", fakeID); code != 4 {
		t.Errorf("sbx get via localhost on another port: exit %d (%s), want 4 (no token for it)", code, errOut)
	}
	if got := localhostAsIPv4("http://LOCALHOST:8080/x"); got != "http://127.0.0.1:8080/x" {
		t.Errorf("localhostAsIPv4: got %s", got)
	}
}
