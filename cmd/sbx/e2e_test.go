package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

type execResult struct {
	ExitCode       int     `json:"exit_code"`
	Signal         *string `json:"signal"`
	Stdout         string  `json:"stdout"`
	Stderr         string  `json:"stderr"`
	StdoutEncoding string  `json:"stdout_encoding"`
	TimedOut       bool    `json:"timed_out"`
	Truncated      bool    `json:"truncated"`
}

// TestEndToEnd drives the real `sbx dev` binary over HTTP through a whole
// sandbox life, on SQLite and on Postgres, and checks the ledger after.
func TestEndToEnd(t *testing.T) {
	forEachBackend(t, func(t *testing.T, dbURL string) {
		dataDir := t.TempDir()
		p := startDev(t, dataDir, dbURL)

		var sb sbView
		if code := p.call("POST", "/api/v1/sandboxes", map[string]any{"profile": "tuist-linux-small"}, &sb); code != 201 {
			t.Fatalf("create: status %d", code)
		}
		if sb.Status != "pending" {
			t.Fatalf("create: status %q, want pending", sb.Status)
		}
		ready := p.waitStatus(sb.ID, "ready", 5*time.Second)
		if ready.Workspace == nil {
			t.Fatal("ready sandbox has no workspace path")
		}
		id := sb.ID

		t.Run("exec", func(t *testing.T) { testExec(t, p, id) })
		t.Run("files", func(t *testing.T) { testFiles(t, p, id) })
		t.Run("services via the CLI", func(t *testing.T) { testServicesCLI(t, p, id) })
		t.Run("files via the CLI", func(t *testing.T) { testFilesCLI(t, p, id) })

		var del sbView
		if code := p.call("DELETE", "/api/v1/sandboxes/"+id, nil, &del); code != 200 {
			t.Fatalf("delete: status %d", code)
		}
		if del.Status != "terminating" {
			t.Fatalf("delete: status %q, want terminating", del.Status)
		}
		if code := p.call("DELETE", "/api/v1/sandboxes/"+id, nil, nil); code != 200 {
			t.Fatalf("second delete: status %d, want 200", code)
		}
		p.waitStatus(id, "terminated", 10*time.Second)
		var ex execResult
		if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "true"}, &ex); code != 409 {
			t.Fatalf("exec on terminated sandbox: status %d, want 409", code)
		}
		p.stop()

		st := openStore(t, dataDir, dbURL)
		sessions, err := st.Sessions(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if len(sessions) != 1 {
			t.Fatalf("ledger has %d sessions, want exactly 1: %+v", len(sessions), sessions)
		}
		s := sessions[0]
		if s.EndedAt == nil || s.EndReason != "explicit_delete" || s.Kind != store.SessionCompute {
			t.Fatalf("session = %+v, want one closed compute interval with reason explicit_delete", s)
		}
		if !s.EndedAt.After(s.StartedAt) {
			t.Fatalf("session ends (%v) before it starts (%v)", s.EndedAt, s.StartedAt)
		}
	})
}

func testExec(t *testing.T, p *devProc, id string) {
	timeout := 1.0
	// A sleep length unique to this run marks the timed-out command's
	// processes, so the survivor check cannot see anyone else's sleeps.
	marker := fmt.Sprintf("3%d.%06d", time.Now().UnixNano()%1000, time.Now().Nanosecond()/1000)
	cases := []struct {
		name string
		req  map[string]any
		want func(execResult) string // "" when fine
	}{
		{"exit code and stderr", map[string]any{"command": "echo out; echo err >&2; exit 3"}, func(r execResult) string {
			if r.ExitCode != 3 || r.Stdout != "out\n" || r.Stderr != "err\n" {
				return "want exit 3, out\\n, err\\n"
			}
			return ""
		}},
		{"stdin", map[string]any{"command": "wc -c; cat", "stdin": "hello\n"}, func(r execResult) string {
			if r.Stdout != "6\nhello\n" && !strings.HasSuffix(r.Stdout, "6\n") {
				return "want the byte count of stdin"
			}
			return ""
		}},
		{"env", map[string]any{"command": "printf %s \"$GREETING\"", "env": map[string]string{"GREETING": "hi there 'friend' $HOME"}}, func(r execResult) string {
			if r.Stdout != "hi there 'friend' $HOME" {
				return "want the env value verbatim"
			}
			return ""
		}},
		{"args verbatim", map[string]any{"command": "printf", "args": []string{"[%s]", "a b", "$HOME", "`id`", "it's", "*", ""}}, func(r execResult) string {
			if r.Stdout != "[a b][$HOME][`id`][it's][*][]" {
				return "want every arg verbatim"
			}
			return ""
		}},
		{"runs in workspace", map[string]any{"command": "pwd"}, func(r execResult) string {
			if !strings.HasSuffix(strings.TrimSpace(r.Stdout), "workspace") {
				return "want cwd to be the workspace"
			}
			return ""
		}},
		{"binary output", map[string]any{"command": "printf '\\377\\376'"}, func(r execResult) string {
			if r.StdoutEncoding != "base64" || r.Stdout != "//4=" {
				return "want base64 of ff fe"
			}
			return ""
		}},
		{"timeout kills the group", map[string]any{"command": "sleep " + marker + " & sleep " + marker + "; echo never", "timeout_seconds": timeout}, func(r execResult) string {
			if !r.TimedOut || strings.Contains(r.Stdout, "never") {
				return "want timed_out"
			}
			return ""
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r execResult
			if code := p.call("POST", "/api/v1/sandboxes/"+id+"/exec", c.req, &r); code != 200 {
				t.Fatalf("exec %v: status %d", c.req, code)
			}
			if msg := c.want(r); msg != "" {
				t.Fatalf("exec %v = %+v: %s", c.req, r, msg)
			}
		})
	}
	// The timed-out command's background sleep must be gone too.
	var r execResult
	p.call("POST", "/api/v1/sandboxes/"+id+"/exec", map[string]any{"command": "pgrep -f '[s]leep " + marker + "' || true"}, &r)
	if strings.TrimSpace(r.Stdout) != "" {
		t.Fatalf("processes of the timed-out command survive: %q", r.Stdout)
	}
}

func testFiles(t *testing.T, p *devProc, id string) {
	data := make([]byte, 50<<20)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(data)
	url := p.API + "/api/v1/sandboxes/" + id + "/files/big/dir/blob.bin"

	req, _ := http.NewRequest("PUT", url, bytes.NewReader(data))
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err := p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 201 {
		t.Fatalf("PUT 50 MiB: status %d", resp.StatusCode)
	}

	req, _ = http.NewRequest("GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+p.Token)
	resp, err = p.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET 50 MiB: status %d, err %v", resp.StatusCode, err)
	}
	if n != int64(len(data)) || !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatalf("GET returned %d bytes with a different digest; want %d bytes byte-for-byte", n, len(data))
	}

	var listing struct {
		Entries []struct {
			Name  string `json:"name"`
			IsDir bool   `json:"is_dir"`
		} `json:"entries"`
	}
	if code := p.call("GET", "/api/v1/sandboxes/"+id+"/files/big/dir", nil, &listing); code != 200 {
		t.Fatalf("list folder: status %d", code)
	}
	if len(listing.Entries) != 1 || listing.Entries[0].Name != "blob.bin" {
		t.Fatalf("listing = %+v, want blob.bin", listing.Entries)
	}
	for _, bad := range []string{"../etc/passwd", "a/../../x", "%2e%2e/secret"} {
		if code := p.call("GET", "/api/v1/sandboxes/"+id+"/files/"+bad, nil, nil); code != 400 {
			t.Errorf("GET files/%s: status %d, want 400", bad, code)
		}
	}
	if code := p.call("DELETE", "/api/v1/sandboxes/"+id+"/files/big/dir/blob.bin", nil, nil); code != 204 {
		t.Fatalf("delete file: status %d", code)
	}
	if code := p.call("GET", "/api/v1/sandboxes/"+id+"/files/big/dir/blob.bin", nil, nil); code != 404 {
		t.Fatalf("GET deleted file: status %d, want 404", code)
	}
}

// testServicesCLI declares, lists, reads and removes a service with the
// real sbx binary against the stack.
func testServicesCLI(t *testing.T, p *devProc, id string) {
	env := append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "HOME="+t.TempDir())
	sbx := func(args ...string) string {
		t.Helper()
		out, errOut, code := runEnv(t, env, sbxBinary(t), args...)
		if code != 0 {
			t.Fatalf("sbx %v: exit %d, stderr %q", args, code, errOut)
		}
		if strings.Contains(out+errOut, p.Token) {
			t.Fatalf("sbx %v: output shows the token", args)
		}
		return out
	}
	sbx("services", "set", id, "hello", "--env", "WHO=cli", "--", "sh", "-c", "echo hello from $WHO; sleep 600")
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if strings.Contains(sbx("services", "logs", id, "hello", "--tail", "10"), "hello from cli") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("sbx services logs never showed the service's line")
		}
	}
	if out := sbx("services", id); !regexp.MustCompile(`(?m)^hello\s+(starting|running)\s`).MatchString(out) {
		t.Errorf("sbx services: %q, want hello starting or running", out)
	}
	sbx("services", "rm", id, "hello")
	if out := sbx("services", id, "-o", "json"); strings.Contains(out, `"hello"`) {
		t.Errorf("sbx services after rm: %s", out)
	}
}

// testFilesCLI round-trips a file through sbx files (stdin up, a name
// that needs escaping), lists its folder and removes it recursively.
func testFilesCLI(t *testing.T, p *devProc, id string) {
	env := append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "HOME="+t.TempDir())
	sbx := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, code := runLimited(t, 2*time.Minute, env, stdin, sbxBinary(t), args...)
		if code != 0 {
			t.Fatalf("sbx %v: exit %d, stderr %q", args, code, errOut)
		}
		return out
	}
	sbx("from stdin\n", "files", "put", id, "cli dir/a b#1.txt")
	if got := sbx("", "files", "get", id, "cli dir/a b#1.txt", "-"); got != "from stdin\n" {
		t.Errorf("files get: %q, want what was put", got)
	}
	if got := sbx("", "files", "ls", id, "cli dir"); !strings.Contains(got, "a b#1.txt") {
		t.Errorf("files ls: %q, want the file", got)
	}
	sbx("", "files", "rm", "-r", id, "cli dir")
	if _, errOut, code := runLimited(t, time.Minute, env, "", sbxBinary(t), "files", "ls", id, "cli dir"); code != 5 {
		t.Errorf("files ls after rm -r: exit %d (%q), want 5 (not found)", code, errOut)
	}
}
