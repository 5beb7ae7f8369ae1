package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Routes of the API whose request counts show which road exec took.
const (
	streamRoute   = "GET /api/v1/sandboxes/{id}/exec/stream 101"
	sshTokenRoute = "POST /api/v1/sandboxes/{id}/ssh_tokens 201"
)

// apiRequests sums sbx_api_requests_total by "METHOD route code".
func apiRequests(t *testing.T, p *devProc) map[string]float64 {
	t.Helper()
	return p.scrapeSums(t, "sbx_api_requests_total", func(l map[string]string) string {
		return l["method"] + " " + l["route"] + " " + l["code"]
	})
}

// TestExecStreams: sbx exec with -i, -t and pipes, as docker and kubectl
// have them, against a real dev stack: piped stdin reaches the command
// with and without a terminal, the remote exit status is sbx's, the
// terminal runs over the API's WebSocket stream (never an SSH
// credential), and refusals are one line without the token.
func TestExecStreams(t *testing.T) {
	t.Parallel()
	p := startDev(t, t.TempDir(), "")
	id := createReady(t, p)
	bin := sbxBinary(t)
	env := append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+p.Token, "SBX_CONFIG_DIR="+filepath.Join(t.TempDir(), "cfg"), "TERM=xterm")
	before := apiRequests(t, p)

	for _, tc := range []struct {
		name     string
		stdin    string
		args     []string
		code     int
		out      string // stdout holds it
		errOut   string // stderr holds it ("": stderr is empty)
		terminal bool   // went over the terminal stream
	}{
		{"-i sends piped stdin", "hi\n", []string{"exec", "-i", id, "--", "cat"}, 0, "hi\n", "", false},
		{"piped stdin without -i is not read", "hello\n", []string{"exec", id, "--", "wc", "-c"}, 0, "0", "", false},
		{"-it on a pipe runs without a terminal", "hi\n", []string{"exec", "-it", id, "--", "cat"}, 0, "hi\n", "stdin is not a terminal", false},
		{"-itt forces a terminal on a pipe", "tty\nexit 7\n", []string{"exec", "-itt", id, "--", "sh"}, 7, "/dev/pts/", "", true},
		{"-itt ends the input with Ctrl-D", "typed", []string{"exec", "-itt", id, "--", "cat"}, 0, "typed", "", true},
		{"-t without -i: a terminal, no input", "ignored\n", []string{"exec", "-t", id, "--", "sh", "-c", "tty; exit 5"}, 5, "/dev/pts/", "", true},
		{"exit status without a terminal", "", []string{"exec", id, "exit 4"}, 4, "", "", false},
		{"no terminal after one on the same connection", "", []string{"exec", id, "--", "tty"}, 1, "not a tty\n", "", false},
		{"flags after the ID", "", []string{"exec", id, "-t", "--", "printf", "%s|", "a b", "$HOME"}, 0, "a b|$HOME|", "", true},
		{"unknown sandbox", "", []string{"exec", "-t", "sbx-nosuch", "--", "true"}, 5, "", "no sandbox with that id", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			beforeCase := apiRequests(t, p)[streamRoute]
			out, errOut, code := runLimited(t, 2*time.Minute, env, tc.stdin, bin, tc.args...)
			if code != tc.code || !strings.Contains(out, tc.out) {
				t.Errorf("sbx %v: exit %d stdout %q, want %d and %q (stderr %q)", tc.args, code, out, tc.code, tc.out, errOut)
			}
			if tc.errOut == "" && errOut != "" || !strings.Contains(errOut, tc.errOut) {
				t.Errorf("sbx %v: stderr %q, want %q", tc.args, errOut, tc.errOut)
			}
			if strings.Count(strings.TrimSpace(errOut), "\n") > 0 {
				t.Errorf("sbx %v: stderr is not one line: %q", tc.args, errOut)
			}
			// The API counts a request when its handler returns, which may
			// be just after sbx, told the exit status, has gone.
			got := apiRequests(t, p)[streamRoute] - beforeCase
			for deadline := time.Now().Add(10 * time.Second); tc.terminal && got == 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Millisecond)
				got = apiRequests(t, p)[streamRoute] - beforeCase
			}
			if (got > 0) != tc.terminal {
				t.Errorf("sbx %v: %v terminal streams opened, want terminal=%v", tc.args, got, tc.terminal)
			}
		})
	}
	if got := apiRequests(t, p)[sshTokenRoute] - before[sshTokenRoute]; got != 0 {
		t.Errorf("%v SSH credentials minted, want none: exec must not go over SSH", got)
	}

	t.Run("refused token", func(t *testing.T) {
		const bad = "sbx_at_not-a-real-token-0123456789"
		env := append(os.Environ(), "SBX_API="+p.API, "SBX_TOKEN="+bad, "SBX_CONFIG_DIR="+filepath.Join(t.TempDir(), "cfg"))
		out, errOut, code := runLimited(t, 2*time.Minute, env, "", bin, "--debug", "exec", "-t", id, "--", "true")
		if code != 4 || !strings.Contains(errOut, "refused the token") {
			t.Errorf("exit %d stderr %q, want 4 and a refused token", code, errOut)
		}
		if strings.Contains(out+errOut, "not-a-real-token") {
			t.Errorf("the token was printed: %q", out+errOut)
		}
	})
}
