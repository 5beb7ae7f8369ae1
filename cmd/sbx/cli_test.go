package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// fakeToken is what the tests put in SBX_TOKEN and the config file; it
// must never show up in any output.
const fakeToken = "sbx_at_FAKE0SECRET0TOKEN0MATERIAL0xyz"

// cliEnv isolates a test's CLI from the machine: its own config dir,
// data dir and HOME, SBX_TOKEN set to fakeToken.
func cliEnv(t *testing.T, api string) {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("HOME", dir)
	t.Setenv("SBX_CONFIG_DIR", filepath.Join(dir, "config"))
	t.Setenv("SBX_DATA_DIR", filepath.Join(dir, "data"))
	t.Setenv("SBX_API", api)
	t.Setenv("SBX_TOKEN", fakeToken)
	if err := writeConfig(cliConfig{Token: fakeToken}); err != nil {
		t.Fatal(err)
	}
}

// runCLI runs the CLI in-process and returns its exit code and output.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = execute(context.Background(), args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// commandPaths lists every command of the tree, e.g. "files put".
func commandPaths() [][]string {
	var paths [][]string
	var walk func(c *cobra.Command, prefix []string)
	walk = func(c *cobra.Command, prefix []string) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" {
				continue
			}
			p := append(append([]string(nil), prefix...), sub.Name())
			paths = append(paths, p)
			walk(sub, p)
		}
	}
	walk(newRootCmd(newApp(nil, io.Discard, io.Discard)), nil)
	return paths
}

// TestEveryHelp: every command's --help (and -h) exits 0, shows its
// usage with the positional arguments it takes and an example, and never
// shows the token, which sits in SBX_TOKEN and the config file.
func TestEveryHelp(t *testing.T) {
	cliEnv(t, "http://127.0.0.1:1")
	paths := commandPaths()
	if len(paths) < 20 {
		t.Fatalf("found %d commands, want the whole tree", len(paths))
	}
	for _, p := range append(paths, []string{}) {
		for _, flag := range []string{"--help", "-h"} {
			args := append(append([]string(nil), p...), flag)
			name := strings.Join(args, " ")
			if len(p) > 0 && (p[0] == "dev" || p[0] == "admin") {
				continue // their own flag sets print to the process's stderr: TestStdFlagHelp
			}
			code, out, errOut := runCLI(t, "", args...)
			if code != 0 {
				t.Errorf("sbx %s: exit %d, want 0 (stderr %q)", name, code, errOut)
			}
			if strings.Contains(out+errOut, fakeToken) || strings.Contains(out+errOut, "sbx_at_") {
				t.Errorf("sbx %s: output shows token material:\n%s%s", name, out, errOut)
			}
			if !strings.Contains(out, "Usage:") {
				t.Errorf("sbx %s: no usage in %q", name, out)
			}
		}
	}
	// Positional arguments are named in the usage line.
	for cmd, want := range map[string]string{
		"get": "sbx get ID", "exec": "sbx exec ID [--] CMD [ARG...]", "files put": "sbx files put ID PATH [SRC]",
		"extend": "sbx extend ID MINUTES", "ssh": "sbx ssh ID [SSH ARG...]", "ports": "sbx ports ID [PORT]",
		"ssh-key": "sbx ssh-key ID FILE", "files get": "sbx files get ID PATH [DEST]", "destroy": "sbx destroy ID",
		"services": "sbx services ID", "services set": "sbx services set ID NAME [--] COMMAND [ARG...]", "services rm": "sbx services rm ID NAME",
		"services logs": "sbx services logs ID NAME",
	} {
		_, out, _ := runCLI(t, "", append(strings.Fields(cmd), "--help")...)
		if !strings.Contains(out, want) {
			t.Errorf("sbx %s --help: usage does not show %q:\n%s", cmd, want, out)
		}
		if !strings.Contains(out, "Examples:") {
			t.Errorf("sbx %s --help: no examples", cmd)
		}
	}
}

// TestStdFlagHelp: dev and admin (own flag sets) answer --help with exit 0
// from the real binary, admin without a database. Neither the token nor
// a secret in the environment (a URL's password, the OIDC client secret)
// shows, in --help or in the usage a bad flag prints.
func TestStdFlagHelp(t *testing.T) {
	const pw = "FAKE0PASSWORD0xyz"
	secrets := []string{"SBX_TOKEN=" + fakeToken, "SBX_REDIS_URL=redis://:" + pw + "@127.0.0.1:1", "SBX_OIDC_CLIENT_SECRET=" + pw, "SBX_DEV_TOKEN=" + fakeToken}
	for _, tc := range []struct {
		args []string
		db   string // SBX_DATABASE_URL
		code int
	}{
		{[]string{"dev", "--help"}, "postgres://sbx:" + pw + "@127.0.0.1:1/sbx", 0},
		{[]string{"dev", "--no-such-flag"}, "postgres://sbx:" + pw + "@127.0.0.1:1/sbx", 2},
		{[]string{"admin", "--help"}, "", 0},
		{[]string{"admin", "account", "create", "--help"}, "", 0},
		{[]string{"admin", "token", "mint", "-h"}, "", 0},
		// Usage mistakes, told as such before any database is looked for.
		{[]string{"admin"}, "", 2},
		{[]string{"admin", "acount", "create", "x"}, "", 2},
	} {
		cmd := execCommand(t, tc.args...)
		cmd.Env = append(append(os.Environ(), secrets...), "SBX_DATA_DIR="+t.TempDir(), "SBX_DATABASE_URL="+tc.db)
		out, err := cmd.CombinedOutput()
		if code := cmd.ProcessState.ExitCode(); code != tc.code {
			t.Errorf("sbx %v: %v, want exit %d\n%s", tc.args, err, tc.code, out)
		}
		if strings.Contains(string(out), fakeToken) || strings.Contains(string(out), pw) || !strings.Contains(string(out), "sbx") {
			t.Errorf("sbx %v shows a secret, or no usage:\n%s", tc.args, out)
		}
	}
	// The hidden command sshd runs is not offered to people.
	for _, args := range [][]string{{"--help"}, {"help"}, {"__complete", ""}} {
		if _, out, _ := runCLI(t, "", args...); strings.Contains(out, sandboxInitCmd) || !strings.Contains(out, "dev") {
			t.Errorf("sbx %v names the hidden %s, or not dev:\n%s", args, sandboxInitCmd, out)
		}
	}
}

// fakeAPI records requests and answers with canned JSON to requests
// that carry its token (fakeToken unless token is set).
type fakeAPI struct {
	token string
	mu    sync.Mutex
	reqs  []recorded
}

type recorded struct {
	Method, Path, Auth string
	Body               map[string]any
}

func (f *fakeAPI) last(t *testing.T) recorded {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.reqs) == 0 {
		t.Fatal("no request reached the API")
	}
	return f.reqs[len(f.reqs)-1]
}

const fakeID = "sbx-aaaaaaaaaaaaaaaaaaaaaaaaaa"

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := recorded{Method: r.Method, Path: r.URL.Path, Auth: r.Header.Get("Authorization")}
	_ = json.NewDecoder(r.Body).Decode(&rec.Body)
	f.mu.Lock()
	f.reqs = append(f.reqs, rec)
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch {
	case r.Header.Get("Authorization") != "Bearer "+cmp.Or(f.token, fakeToken):
		w.WriteHeader(401)
		_, _ = io.WriteString(w, `{"status":401,"code":"unauthenticated","detail":"missing or invalid token"}`)
	case strings.HasSuffix(r.URL.Path, "/exec"):
		// sbx exec streams.
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: stdout\ndata: {\"data\":\"ok\\n\",\"encoding\":\"utf-8\"}\n\n"+
			"event: exit\ndata: {\"exit_code\":0,\"signal\":null,\"stdout_truncated\":false,\"stderr_truncated\":false,\"truncated\":false,\"timed_out\":false,\"duration_ms\":1}\n\n")
	case strings.HasSuffix(r.URL.Path, "/logs") && r.URL.Query().Get("follow") == "true":
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: line\ndata: {\"at\":\"2030-01-01T00:00:00Z\",\"text\":\"listening\"}\n\n")
	case strings.HasSuffix(r.URL.Path, "/services"):
		_, _ = io.WriteString(w, `{"services":[{"name":"web","state":"running","port":5173,"exit_code":null,"last_start_at":"2030-01-01T00:00:00Z"}]}`)
	case strings.HasSuffix(r.URL.Path, "/ports"):
		_, _ = io.WriteString(w, `{"port":3000,"url":"http://x.preview.localhost:8081"}`)
	default:
		_, _ = io.WriteString(w, `{"id":"`+fakeID+`","status":"ready","profile":"p","platform":"linux","deadline_at":"2030-01-01T00:00:00Z"}`)
	}
}

// TestFlagsAndArguments: flags work before and after positional
// arguments, `--` ends them, and wrong arguments are refused with exit 2
// before anything reaches the API.
func TestFlagsAndArguments(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	accepted := []struct {
		name   string
		args   []string
		method string
		path   string
		body   map[string]any
	}{
		{"public after the port", []string{"ports", fakeID, "3000", "--public"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports",
			map[string]any{"port": 3000.0, "access": "public"}},
		{"public before the ID", []string{"ports", "--public", fakeID, "3000"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports",
			map[string]any{"port": 3000.0, "access": "public"}},
		// No flag: the port's access and host policy stay as they are
		// (README's URL=$(sbx ports $ID 3000) once made a public port
		// private).
		{"port URL again", []string{"ports", fakeID, "3000"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports",
			map[string]any{"port": 3000.0}},
		{"private again", []string{"ports", fakeID, "3000", "--private", "--host-localhost"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports",
			map[string]any{"port": 3000.0, "access": "private", "host_policy": "localhost"}},
		{"exec flag between ID and --", []string{"exec", fakeID, "--timeout", "2", "--", "sleep", "1"}, "POST", "/api/v1/sandboxes/" + fakeID + "/exec",
			map[string]any{"command": "sleep", "args": []any{"1"}, "timeout_seconds": 2.0}},
		{"exec flags of the command after --", []string{"exec", fakeID, "--", "ls", "-la", "--timeout"}, "POST", "/api/v1/sandboxes/" + fakeID + "/exec",
			map[string]any{"command": "ls", "args": []any{"-la", "--timeout"}, "timeout_seconds": 60.0}},
		{"exec -i after the ID", []string{"exec", fakeID, "-i", "--", "cat"}, "POST", "/api/v1/sandboxes/" + fakeID + "/exec",
			map[string]any{"command": "cat", "timeout_seconds": 60.0}},
		{"exec -it with stdin not a terminal runs without one", []string{"exec", "-it", fakeID, "--", "cat"}, "POST", "/api/v1/sandboxes/" + fakeID + "/exec",
			map[string]any{"command": "cat", "timeout_seconds": 60.0}},
		{"exec shell line", []string{"exec", fakeID, "echo $HOME"}, "POST", "/api/v1/sandboxes/" + fakeID + "/exec",
			map[string]any{"command": "echo $HOME", "timeout_seconds": 60.0}},
		// No --profile: the body names none and the server's default applies.
		{"create deadline after", []string{"create", "--wait", "0", "--deadline", "30"}, "POST", "/api/v1/sandboxes",
			map[string]any{"deadline_minutes": 30.0}},
		{"create with a profile", []string{"create", "--wait", "0", "--profile", "tuist-linux-large"}, "POST", "/api/v1/sandboxes",
			map[string]any{"profile": "tuist-linux-large"}},
		{"global flag after the ID", []string{"get", fakeID, "-o", "json"}, "GET", "/api/v1/sandboxes/" + fakeID, nil},
		{"extend adds", []string{"extend", fakeID, "45"}, "PATCH", "/api/v1/sandboxes/" + fakeID, map[string]any{"extend_minutes": 45.0}},
		{"update sends only the flags given", []string{"update", fakeID, "--idle-timeout", "3", "--keep-awake=false"}, "PATCH", "/api/v1/sandboxes/" + fakeID, map[string]any{"idle_timeout_minutes": 3.0, "keep_awake_while_busy": false}},
		{"services list", []string{"services", fakeID, "-o", "json"}, "GET", "/api/v1/sandboxes/" + fakeID + "/services", nil},
		{"service set with flags after NAME", []string{"services", "set", fakeID, "web", "--port", "5173", "--env", "A=1=2", "--cwd", "app", "--", "npm", "run", "dev", "--host"},
			"PUT", "/api/v1/sandboxes/" + fakeID + "/services/web",
			map[string]any{"command": "npm", "args": []any{"run", "dev", "--host"}, "cwd": "app", "env": map[string]any{"A": "1=2"}, "port": 5173.0}},
		{"service set shell line", []string{"services", "set", fakeID, "api", "python3 -m http.server $PORT"}, "PUT", "/api/v1/sandboxes/" + fakeID + "/services/api",
			map[string]any{"command": "python3 -m http.server $PORT"}},
		{"service rm", []string{"services", "rm", fakeID, "web"}, "DELETE", "/api/v1/sandboxes/" + fakeID + "/services/web", nil},
		{"service logs follow after NAME", []string{"services", "logs", fakeID, "web", "-f"}, "GET", "/api/v1/sandboxes/" + fakeID + "/services/web/logs", nil},
		{"port label", []string{"ports", fakeID, "3000", "--label", "web"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports",
			map[string]any{"label": "web", "port": 3000.0}},
		{"share for two hours", []string{"share", fakeID, "3000", "--for", "2h", "--note", "design review"}, "POST", "/api/v1/sandboxes/" + fakeID + "/ports/3000/shares",
			map[string]any{"expires_in_minutes": 120.0, "note": "design review"}},
		{"ports rm", []string{"ports", fakeID, "3000", "--rm"}, "DELETE", "/api/v1/sandboxes/" + fakeID + "/ports/3000", nil},
		{"events list", []string{"events", fakeID}, "GET", "/api/v1/sandboxes/" + fakeID + "/events", nil},
		{"ports list", []string{"ports", fakeID}, "GET", "/api/v1/sandboxes/" + fakeID + "/ports", nil},
		{"rm recursive after the path", []string{"files", "rm", fakeID, "build", "-r"}, "DELETE", "/api/v1/sandboxes/" + fakeID + "/files/build", nil},
	}
	for _, tc := range accepted {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, "", tc.args...)
			if code != 0 {
				t.Fatalf("sbx %v: exit %d, stderr %q", tc.args, code, errOut)
			}
			got := api.last(t)
			if got.Method != tc.method || got.Path != tc.path {
				t.Errorf("sbx %v: sent %s %s, want %s %s", tc.args, got.Method, got.Path, tc.method, tc.path)
			}
			if tc.body != nil {
				gb, _ := json.Marshal(got.Body)
				wb, _ := json.Marshal(tc.body)
				if string(gb) != string(wb) {
					t.Errorf("sbx %v: body %s, want %s", tc.args, gb, wb)
				}
			}
			if strings.Contains(out+errOut, fakeToken) {
				t.Errorf("sbx %v: token in output", tc.args)
			}
		})
	}

	refused := []struct {
		name string
		args []string
		want string
	}{
		{"unknown flag", []string{"destroy", fakeID, "--force"}, "unknown flag: --force"},
		{"extra argument", []string{"get", fakeID, "extra"}, `unexpected argument "extra": sbx get ID`},
		{"a verb that ports does not have", []string{"ports", "expose", fakeID, "8000"}, `unexpected argument "8000": sbx ports ID [PORT]`},
		{"missing ID", []string{"get"}, "missing ID"},
		{"share without --for", []string{"share", fakeID, "3000"}, "--for 0s: want whole minutes"},
		{"share for seconds", []string{"share", fakeID, "3000", "--for", "90s"}, "want whole minutes"},
		{"negative deadline", []string{"create", "--deadline", "-5"}, "at least 1"},
		{"zero deadline", []string{"create", "--deadline=0"}, "at least 1"},
		{"extend zero", []string{"extend", fakeID, "0"}, "at least 1"},
		{"extend not a number", []string{"extend", fakeID, "soon"}, `MINUTES "soon"`},
		{"exec without command", []string{"exec", fakeID}, "missing CMD"},
		{"exec command flags before --", []string{"exec", fakeID, "ls", "-la"}, "unknown shorthand flag: 'l' in -la; the command's own flags go after --: sbx exec ID -- CMD [ARG...]"},
		{"service command flags before --", []string{"services", "set", fakeID, "web", "npm", "--port-x"}, "the command's own flags go after --: sbx services set ID NAME -- COMMAND"},
		{"deadline not a number", []string{"create", "--deadline", "abc"}, `invalid argument "abc" for "--deadline" flag: want a whole number`},
		{"extend negative", []string{"extend", fakeID, "-5"}, "(a negative number reads as a flag)"},
		{"exec ID after --", []string{"exec", "--", fakeID, "ls"}, "the ID goes before --"},
		{"exec -i with --no-stdin", []string{"exec", fakeID, "-i", "--no-stdin", "--", "cat"}, "choose one"},
		{"exec --timeout on a terminal", []string{"exec", "-t", fakeID, "--timeout", "5", "--", "sh"}, "--timeout applies without a terminal"},
		{"port not a number", []string{"ports", fakeID, "http"}, `PORT "http"`},
		{"public without a port", []string{"ports", fakeID, "--public"}, "need a PORT"},
		{"public and private", []string{"ports", fakeID, "3000", "--public", "--private"}, "choose one"},
		{"absolute put path", []string{"files", "put", fakeID, "/etc/x.txt", "x"}, `"/etc/x.txt" is absolute`},
		{"files without verb args", []string{"files", "get", fakeID}, "missing PATH"},
		// ".." as the URL's last segment is resolved away: "files/.."
		// once sent DELETE /api/v1/sandboxes/ID/, and destroyed it.
		{"rm path leaving the workspace", []string{"files", "rm", fakeID, ".."}, `PATH ".." leaves the workspace`},
		{"ls path leaving the workspace", []string{"files", "ls", fakeID, "docs/../../x"}, "leaves the workspace"},
		{"service rm ..", []string{"services", "rm", fakeID, ".."}, `NAME ".." names nothing`},
		{"service logs .", []string{"services", "logs", fakeID, "."}, `NAME "." names nothing`},
		{"destroy ..", []string{"destroy", ".."}, `ID ".." names nothing`},
		{"unknown command", []string{"destory", fakeID}, "unknown command"},
		{"bad output", []string{"list", "-o", "yaml"}, "want table, json or id"},
		{"ssh ttl too long", []string{"ssh", "--ttl", "90", fakeID}, "from 1 to 60"},
		// Everything after the ID is ssh's; sbx's -o there is a mistake,
		// not an ssh option.
		{"ssh -o json after the ID", []string{"ssh", fakeID, "-o", "json", "true"}, `"-o json" after the ID goes to ssh`},
		{"ssh --output=json after the ID", []string{"ssh", fakeID, "--output=json"}, `"--output=json" after the ID goes to ssh`},
		{"services without ID", []string{"services"}, "missing ID"},
		{"service set without command", []string{"services", "set", fakeID, "web"}, "missing COMMAND"},
		{"service set NAME after --", []string{"services", "set", fakeID, "--", "web", "npm"}, "ID and NAME go before --"},
		{"service set bad env", []string{"services", "set", fakeID, "web", "--env", "NOEQUALS", "--", "x"}, `--env "NOEQUALS"`},
		{"service set bad port", []string{"services", "set", fakeID, "web", "--port", "0", "--", "x"}, "--port 0"},
		{"service rm without NAME", []string{"services", "rm", fakeID}, "missing NAME"},
		{"service logs bad tail", []string{"services", "logs", fakeID, "web", "--tail", "0"}, "--tail 0"},
		{"completion shell", []string{"completion", "tcsh"}, "invalid argument"},
	}
	for _, tc := range refused {
		t.Run(tc.name, func(t *testing.T) {
			api.mu.Lock()
			before := len(api.reqs)
			api.mu.Unlock()
			code, _, errOut := runCLI(t, "", tc.args...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Errorf("sbx %v: exit %d stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("sbx %v: error is not one line: %q", tc.args, errOut)
			}
			api.mu.Lock()
			after := len(api.reqs)
			api.mu.Unlock()
			if after != before {
				t.Errorf("sbx %v: %d requests reached the API, want none", tc.args, after-before)
			}
		})
	}
}

// TestErrorsSayWhatToDo: the common failures are one line that names the
// fix, with the documented exit code, and the token is never printed,
// not even with --debug.
func TestErrorsSayWhatToDo(t *testing.T) {
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()
	// A server that accepts and never answers.
	stuck := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }))
	t.Cleanup(stuck.Close)
	api := httptest.NewServer(&fakeAPI{})
	t.Cleanup(api.Close)

	for _, tc := range []struct {
		name  string
		api   string
		token string
		args  []string
		code  int
		want  string
	}{
		{"nothing listening", refused, fakeToken, []string{"list"}, 3, "start it with `sbx dev`"},
		{"never answers", stuck.URL, fakeToken, []string{"list", "--api-timeout", "300ms"}, 3, "did not answer within 300ms"},
		{"wrong token", api.URL, "sbx_at_wrong", []string{"list"}, 4, "check SBX_TOKEN"},
		{"debug redacts", api.URL, fakeToken, []string{"--debug", "get", fakeID}, 0, "Authorization: [REDACTED]"},
		// A local file that is not there is not the API's fault (the
		// body's open error reaches us inside a *url.Error).
		{"missing local file", api.URL, fakeToken, []string{"files", "put", fakeID, "x.txt", "/nonexistent/sbx-test-file"}, 1, "open /nonexistent/sbx-test-file: no such file or directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cliEnv(t, tc.api)
			t.Setenv("SBX_TOKEN", tc.token)
			code, out, errOut := runCLI(t, "", tc.args...)
			if code != tc.code || !strings.Contains(errOut, tc.want) {
				t.Errorf("sbx %v: exit %d stderr %q; want %d and %q", tc.args, code, errOut, tc.code, tc.want)
			}
			if strings.Contains(out+errOut, tc.token) || strings.Contains(out+errOut, fakeToken) {
				t.Errorf("sbx %v: token in output:\n%s%s", tc.args, out, errOut)
			}
		})
	}
	// A signal (Ctrl-C, SIGTERM) while sbx waits on the API is an
	// interruption, not an unreachable API, whatever the cut dial says.
	t.Run("interrupted", func(t *testing.T) {
		cliEnv(t, stuck.URL)
		t.Setenv("SBX_TOKEN", fakeToken)
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(200*time.Millisecond, cancel)
		var out, errb bytes.Buffer
		code := execute(ctx, []string{"list"}, strings.NewReader(""), &out, &errb)
		if code != 130 || strings.TrimSpace(errb.String()) != "sbx: interrupted" {
			t.Errorf("exit %d stderr %q; want 130 and sbx: interrupted", code, errb.String())
		}
	})
	t.Run("no token anywhere", func(t *testing.T) {
		cliEnv(t, api.URL)
		t.Setenv("SBX_TOKEN", "")
		if err := writeConfig(cliConfig{}); err != nil {
			t.Fatal(err)
		}
		code, _, errOut := runCLI(t, "", "list")
		if code != 4 || !strings.Contains(errOut, "sbx login") {
			t.Errorf("exit %d stderr %q; want 4 and how to log in", code, errOut)
		}
	})
}

// TestLoginStoresTokenPrivately: sbx login checks the token, saves it
// 0600, never echoes it, and later commands use it.
func TestLoginStoresTokenPrivately(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	t.Setenv("SBX_TOKEN", "")
	if err := os.Remove(configFile()); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runCLI(t, "sbx_at_wrong\n", "login"); code != 4 {
		t.Fatalf("login with a wrong token: exit %d %q, want 4", code, errOut)
	}
	code, out, errOut := runCLI(t, fakeToken+"\n", "login", "--api", srv.URL)
	if code != 0 || strings.Contains(out+errOut, fakeToken) {
		t.Fatalf("login: exit %d, output %q %q", code, out, errOut)
	}
	st, err := os.Stat(configFile())
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config file: %v mode %v, want 0600", err, st)
	}
	t.Setenv("SBX_API", "")
	if code, _, errOut := runCLI(t, "", "get", fakeID); code != 0 || api.last(t).Auth != "Bearer "+fakeToken {
		t.Fatalf("get after login: exit %d %q", code, errOut)
	}
}

// execCommand runs the real binary.
func execCommand(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	return exec.Command(sbxBinary(t), args...)
}

// TestServicesOutput: sbx services prints a table with a header, logs -f
// prints each line's text, and neither shows the token.
func TestServicesOutput(t *testing.T) {
	srv := httptest.NewServer(&fakeAPI{})
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	code, out, errOut := runCLI(t, "", "services", fakeID)
	if code != 0 || !regexp.MustCompile(`NAME\s+STATE\s+PORT\s+EXIT\s+STARTED\nweb\s+running\s+5173\s+-\s+\d{4}-`).MatchString(out) {
		t.Errorf("sbx services: exit %d, %q (stderr %q); want the table with web running on 5173", code, out, errOut)
	}
	code, out, errOut = runCLI(t, "", "services", "logs", fakeID, "web", "-f")
	if code != 0 || out != "listening\n" {
		t.Errorf("sbx services logs -f: exit %d, %q (stderr %q); want the line's text", code, out, errOut)
	}
}

// TestExecSaysWhyItWaits: an exec held past the API's wake limit is
// retried, and the retry is said on stderr, scripts included: each
// attempt may have waited a minute at the API.
func TestExecSaysWhyItWaits(t *testing.T) {
	var mu sync.Mutex
	calls := 0
	api := &fakeAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls++
		first := calls == 1 && strings.HasSuffix(r.URL.Path, "/exec")
		mu.Unlock()
		if first {
			unavailable(w, "1", "sandbox_waking", "the sandbox is still being suspended; it wakes once that finishes; retry shortly")
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	t.Setenv("SBX_TOKEN", fakeToken)
	code, out, errOut := runCLI(t, "", "exec", fakeID, "--", "true")
	if code != 0 || out != "ok\n" || !strings.Contains(errOut, "the sandbox is still being suspended; it wakes once that finishes; retry shortly; retrying (1 of 10)") {
		t.Fatalf("exit %d stdout %q stderr %q; want 0, the command's output, and the retry said", code, out, errOut)
	}
}

// TestCreateRidesOutDatabaseBlink: control answering 503
// store_unavailable (its database restarting) does not fail `sbx create`:
// the create is sent again with the same Idempotency-Key, so a first one
// whose answer was lost cannot make a second sandbox.
func TestCreateRidesOutDatabaseBlink(t *testing.T) {
	var (
		mu   sync.Mutex
		keys []string
	)
	api := &fakeAPI{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/api/v1/sandboxes" {
			mu.Lock()
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			first := len(keys) == 1
			mu.Unlock()
			if first {
				unavailable(w, "0", "store_unavailable", "the database is unavailable for the moment; try again shortly")
				return
			}
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	code, out, errOut := runCLI(t, "", "create", "--wait", "0", "-o", "id")
	mu.Lock()
	defer mu.Unlock()
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Fatalf("sbx create through a database blink: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("create requests' Idempotency-Keys: %q; want two, the same, not empty", keys)
	}
}

// unavailable answers 503 with a problem document of code and detail and
// the Retry-After header retryAfter.
func unavailable(w http.ResponseWriter, retryAfter, code, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Retry-After", retryAfter)
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = fmt.Fprintf(w, `{"status":503,"code":%q,"detail":%q}`, code, detail)
}
