package podssh_test

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/podssh"
)

// testTerminal runs a command on a pseudo-terminal: a resize sent right
// after the start (before the server's handler may have read the pty
// request; under -race this caught the embedded server's race) is what the
// command sees, typed input reaches it, and its exit status comes back.
func testTerminal(t *testing.T, ctx context.Context, sb *sandbox) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	term, err := sb.pool.Terminal(ctx, sb.target, podssh.TerminalRequest{
		Command: "read x; stty size; echo got-$x; exit 5", Cols: 80, Rows: 24,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer term.Close()
	if err := term.Resize(100, 30); err != nil {
		t.Fatalf("resize: %v", err)
	}
	if _, err := io.WriteString(term.Stdin(), "hi\n"); err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(term.Stdout())
	res, err := term.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "30 100") || !strings.Contains(string(out), "got-hi") || res.ExitCode != 5 {
		t.Fatalf("output %q exit %d; want size 30 100, got-hi, exit 5", out, res.ExitCode)
	}
}
