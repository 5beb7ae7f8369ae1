package sshbroker

import (
	"strings"
	"testing"
)

func TestExecExitCodesAndStderr(t *testing.T) {
	e := newEnv(t, nil)
	k := e.grant("alpha", nil)
	cases := []struct {
		name, cmd        string
		wantOut, wantErr string
		wantCode         int
	}{
		{"success", "echo hello", "hello\n", "", 0},
		{"exit code", "echo out; echo oops >&2; exit 3", "out\n", "oops\n", 3},
		{"signal", "kill -TERM $$", "", "", 255},
		{"false", "false", "", "", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, e.ssh(testCtx(t, sshCeiling), k, "alpha", nil, c.cmd), nil)
			if r.code != c.wantCode || r.stdout != c.wantOut || !strings.Contains(r.stderr, c.wantErr) {
				t.Fatalf("ssh %q: got code %d stdout %q stderr %q, want %d %q %q", c.cmd, r.code, r.stdout, r.stderr, c.wantCode, c.wantOut, c.wantErr)
			}
		})
	}
}
