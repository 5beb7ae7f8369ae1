package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// exitCodeAPI answers by the sandbox ID in the path: sbx-ok is ready,
// sbx-busy is a 409, sbx-gone a 404, sbx-slow's exec times out, and
// sbx-hang (and a create) never answers until the client gives up or
// stop is closed.
func exitCodeAPI(stop <-chan struct{}) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { exitCodeAnswer(stop, w, r) }
}

func exitCodeAnswer(stop <-chan struct{}, w http.ResponseWriter, r *http.Request) {
	problem := func(status int, code, detail string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "code": code, "detail": detail})
	}
	switch {
	case r.Header.Get("Authorization") != "Bearer "+fakeToken:
		problem(401, "unauthenticated", "missing or invalid token")
	case strings.Contains(r.URL.Path, "sbx-hang") || r.Method == "POST" && r.URL.Path == "/api/v1/sandboxes":
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	case strings.Contains(r.URL.Path, "sbx-busy"):
		problem(409, "sandbox_busy", "the sandbox is busy")
	case strings.Contains(r.URL.Path, "sbx-gone"):
		problem(404, "not_found", "no sandbox with that id")
	case strings.HasSuffix(r.URL.Path, "sbx-slow/exec") && !strings.Contains(r.Header.Get("Accept"), "text/event-stream"):
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"exit_code":124,"signal":null,"stdout":"","stderr":"","stdout_encoding":"utf-8","stderr_encoding":"utf-8","stdout_truncated":false,"stderr_truncated":false,"truncated":false,"timed_out":true,"duration_ms":1000}`)
	case strings.HasSuffix(r.URL.Path, "sbx-slow/exec"):
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "event: exit\ndata: {\"exit_code\":124,\"signal\":null,\"stdout_truncated\":false,\"stderr_truncated\":false,\"truncated\":false,\"timed_out\":true,\"duration_ms\":1000}\n\n")
	default:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"sbx-ok","status":"ready","profile":"p","platform":"linux","deadline_at":"2030-01-01T00:00:00Z"}`)
	}
}

// TestExitCodes is the exit code table of `sbx --help` over the CLI:
// each code for the failure it names, whatever the command, and with
// -o json the same failure as a problem object on stderr carrying it.
func TestExitCodes(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(exitCodeAPI(stop))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(stop) })
	cliEnv(t, srv.URL)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close()

	cases := []struct {
		name      string
		args      []string
		interrupt bool // Ctrl-C arrives while the command waits
		code      int
		problem   string // the JSON problem's code
	}{
		{"success", []string{"get", "sbx-ok"}, false, 0, ""},
		{"the API refused", []string{"extend", "sbx-busy", "5"}, false, 1, "sandbox_busy"},
		{"usage", []string{"get", "sbx-ok", "--nosuchflag"}, false, 2, "usage"},
		{"unreachable", []string{"get", "sbx-ok", "--api", refused}, false, 3, "api_unreachable"},
		{"not found", []string{"get", "sbx-gone"}, false, 5, "not_found"},
		// With -o json the result itself says timed_out: no problem.
		{"exec timed out", []string{"exec", "sbx-slow", "--", "sleep", "99"}, false, 124, ""},
		{"interrupted get", []string{"get", "sbx-hang"}, true, 130, "interrupted"},
		{"interrupted exec", []string{"exec", "sbx-hang", "--", "true"}, true, 130, "interrupted"},
		{"interrupted create", []string{"create"}, true, 130, "interrupted"},
		{"interrupted events -f", []string{"events", "-f", "sbx-hang"}, true, 130, "interrupted"},
		{"interrupted services logs -f", []string{"services", "logs", "-f", "sbx-hang", "web"}, true, 130, "interrupted"},
		{"interrupted files get", []string{"files", "get", "sbx-hang", "a.txt", "-"}, true, 130, "interrupted"},
	}
	for _, tc := range cases {
		for _, asJSON := range []bool{false, true} {
			args := tc.args
			if asJSON {
				args = append([]string{"-o", "json"}, args...)
			}
			t.Run(tc.name+map[bool]string{true: " json"}[asJSON], func(t *testing.T) {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.interrupt {
					time.AfterFunc(300*time.Millisecond, cancel)
				}
				var out, errb bytes.Buffer
				code := execute(ctx, args, strings.NewReader(""), &out, &errb)
				if code != tc.code {
					t.Fatalf("sbx %v: exit %d, want %d (stderr %q)", args, code, tc.code, errb.String())
				}
				if code == exitTimedOut && !strings.Contains(out.String()+errb.String(), map[bool]string{true: `"timed_out": true`, false: "timed out after"}[asJSON]) {
					t.Errorf("sbx %v: output %q %q does not say it timed out", args, out.String(), errb.String())
				}
				if !asJSON || tc.problem == "" {
					return
				}
				var p cliProblem
				if err := json.Unmarshal(errb.Bytes(), &p); err != nil || p.ExitCode != tc.code || p.Code != tc.problem || p.Detail == "" {
					t.Errorf("sbx %v: stderr %q (%v), want a problem with code %q and exit_code %d", args, errb.String(), err, tc.problem, tc.code)
				}
			})
		}
	}
	// 4: a token the API refuses.
	t.Setenv("SBX_TOKEN", "sbx_at_wrong")
	if code, _, errOut := runCLI(t, "", "get", "sbx-ok"); code != 4 {
		t.Errorf("sbx get with a refused token: exit %d, want 4 (%s)", code, errOut)
	}
	code, _, errOut := runCLI(t, "", "get", "sbx-ok", "-o", "json")
	var p cliProblem
	if err := json.Unmarshal([]byte(errOut), &p); code != 4 || err != nil || p.Status != 401 || p.Code != "unauthenticated" || p.ExitCode != 4 {
		t.Errorf("sbx get -o json with a refused token: exit %d, stderr %q, want 4 and the API's problem", code, errOut)
	}
}

// TestHelpHasTheExitCodeTable: the table is in sbx --help.
func TestHelpHasTheExitCodeTable(t *testing.T) {
	_, out, _ := runCLI(t, "", "--help")
	for _, want := range []string{"124", "130", "interrupted"} {
		if !strings.Contains(out, want) {
			t.Errorf("sbx --help lacks %q:\n%s", want, out)
		}
	}
}
