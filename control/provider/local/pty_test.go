package local_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/podssh"
)

// TestPtyIsPerSession: a terminal session on a pooled connection does not
// give the next sessions on that connection a terminal too (the embedded
// server once kept the pty request on the connection's context, so every
// exec after a terminal ran on a tty: CRLF output, stderr merged).
func TestPtyIsPerSession(t *testing.T) {
	perMode(t, time.Minute, func(t *testing.T, ctx context.Context, mode string) {
		const id = "sbx-ptyscope"
		f, _, pool, ep := provisioned(ctx, t, mode, id)
		tg := f.target(id, ep)

		term, err := pool.Terminal(ctx, tg, podssh.TerminalRequest{Command: "tty; exit 0"})
		if err != nil {
			t.Fatal(err)
		}
		out, _ := io.ReadAll(term.Stdout())
		if _, err := term.Wait(ctx); err != nil {
			t.Fatal(err)
		}
		term.Close()
		if !strings.Contains(string(out), "/dev/pts/") {
			t.Fatalf("terminal session: tty printed %q, want a /dev/pts path", out)
		}

		res, err := pool.Exec(ctx, tg, podssh.ExecRequest{Command: "tty; echo err >&2"})
		if err != nil {
			t.Fatal(err)
		}
		if got := string(res.Stdout); got != "not a tty\n" || string(res.Stderr) != "err\n" {
			t.Errorf("exec after a terminal on the same connection: stdout %q stderr %q, want %q and %q", got, res.Stderr, "not a tty\n", "err\n")
		}
	})
}
