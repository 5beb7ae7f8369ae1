package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
)

// syncBuffer is a log sink tests read while control writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecrets: a secret is stored write-only and sealed, delivered into
// the sandbox that names it as env and as a 0400 file, and its value
// appears in no API answer (the secret's own, the sandbox's, lists and
// events), in no log line at debug, and not in the database.
func TestSecrets(t *testing.T) {
	t.Parallel()
	logs := &syncBuffer{}
	key, err := lifecycle.ParseSecretsKey(lifecycle.NewSecretsKey())
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, "sqlite", false, func(c *control.Config) {
		c.Lifecycle.SecretsKey = key
		c.Logger = slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	const value = "npm_s3cr3t-VALUE-4f9d"
	const fileValue = "-----BEGIN KEY-----\nline two s3cr3t-FILE-77\n"
	var answers []string // every API answer but the sandbox's own output
	do := func(method, path string, body any, want int) []byte {
		t.Helper()
		var rd *bytes.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		} else {
			rd = bytes.NewReader(nil)
		}
		code, _, b := e.do("dev", method, path, rd)
		if code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, code, b, want)
		}
		answers = append(answers, string(b))
		return b
	}
	do("POST", "/api/v1/secrets", map[string]string{"name": "NPM_TOKEN", "value": value}, 201)
	do("POST", "/api/v1/secrets", map[string]string{"name": "DEPLOY_KEY", "value": fileValue}, 201)
	do("POST", "/api/v1/secrets", map[string]string{"name": "bad-name", "value": "x"}, 422)
	list := do("GET", "/api/v1/secrets", nil, 200)
	if !strings.Contains(string(list), `"DEPLOY_KEY"`) || !strings.Contains(string(list), `"NPM_TOKEN"`) {
		t.Errorf("list: %s", list)
	}
	// A value with a newline cannot be an environment variable; an
	// unknown secret is named.
	do("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small",
		"secrets": []map[string]string{{"name": "DEPLOY_KEY", "as": "env"}}}, 422)
	do("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small",
		"secrets": []map[string]string{{"name": "NOPE", "as": "env"}}}, 422)

	var sb struct{ ID string }
	_ = json.Unmarshal(do("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small",
		"secrets": []map[string]string{{"name": "NPM_TOKEN", "as": "env"}, {"name": "DEPLOY_KEY", "as": "file"}}}, 201), &sb)
	e.waitStatus(sb.ID, "ready")

	if out := e.execOK(t, sb.ID, map[string]any{"command": `printf %s "$NPM_TOKEN"`}); out.Stdout != value {
		t.Errorf("secret as env: %q", out.Stdout)
	}
	if out := e.execOK(t, sb.ID, map[string]any{"command": `cat "$HOME/.sbx/secrets/DEPLOY_KEY"`}); out.Stdout != fileValue {
		t.Errorf("secret as file: %q", out.Stdout)
	}
	if out := e.execOK(t, sb.ID, map[string]any{"command": `stat -c %a "$HOME/.sbx/secrets/DEPLOY_KEY"`}); out.Stdout != "400\n" {
		t.Errorf("secret file mode: %q, want 400", out.Stdout)
	}
	got := do("GET", "/api/v1/sandboxes/"+sb.ID, nil, 200)
	if !strings.Contains(string(got), `"NPM_TOKEN"`) {
		t.Errorf("GET sandbox does not name its secrets: %s", got)
	}
	do("GET", "/api/v1/sandboxes", nil, 200)
	do("GET", "/api/v1/sandboxes/"+sb.ID+"/events", nil, 200)
	do("DELETE", "/api/v1/secrets/NPM_TOKEN", nil, 204)
	do("DELETE", "/api/v1/secrets/NPM_TOKEN", nil, 404)
	do("DELETE", "/api/v1/sandboxes/"+sb.ID, nil, 200)

	for _, v := range []string{value, "s3cr3t-FILE-77"} {
		for _, a := range answers {
			if strings.Contains(a, v) {
				t.Errorf("an API answer holds a secret value: %s", a)
			}
		}
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log holds a secret value")
		}
		evs, err := e.svc.Store.Events(context.Background(), sb.ID, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if b, _ := json.Marshal(ev); bytes.Contains(b, []byte(v)) {
				t.Errorf("an event holds a secret value: %s", b)
			}
		}
		secs, err := e.svc.Store.Secrets(context.Background(), devseed.AccountID)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range secs {
			if bytes.Contains(s.Sealed, []byte(v)) {
				t.Errorf("secret %s is stored in the clear", s.Name)
			}
		}
	}
	if !strings.Contains(logs.String(), "secret stored") {
		t.Error("the log is empty: the check above proves nothing")
	}
}

// TestSecretsOff: without a key, storing a secret is 503 secrets_disabled.
func TestSecretsOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, "sqlite", true)
	code, _, b := e.do("dev", "POST", "/api/v1/secrets", strings.NewReader(`{"name":"A","value":"v"}`))
	if code != 503 || !strings.Contains(string(b), "secrets_disabled") {
		t.Errorf("POST /secrets without a key: %d %s", code, b)
	}
}
