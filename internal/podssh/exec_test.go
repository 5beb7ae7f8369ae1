package podssh_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

func testExec(t *testing.T, ctx context.Context, sb *sandbox) {
	weird := []string{"a b", "it's", `"dq"`, "$HOME", "`id`", "$(id)", "line1\nline2", "*", "", "héllo ✓ 日本", "-n", `back\slash`, "a;b|c&d>e", "  lead", "'", "''", "%s"}
	var want strings.Builder
	for _, a := range weird {
		fmt.Fprintf(&want, "[%s]\n", a)
	}
	cases := []struct {
		name string
		req  podssh.ExecRequest
		// checks
		stdout, stderr string
		code           int
		signal         string
		truncated      bool
	}{
		{name: "args verbatim", req: podssh.ExecRequest{Command: "printf", Args: append([]string{"[%s]\\n"}, weird...)}, stdout: want.String()},
		{name: "program with no args", req: podssh.ExecRequest{Command: "true", Args: []string{}}},
		{name: "shell line", req: podssh.ExecRequest{Command: "echo $((1+2)) | tr 3 x"}, stdout: "x\n"},
		{name: "env", req: podssh.ExecRequest{Command: `printf '%s|%s' "$FOO" "$B_2"`, Env: map[string]string{"FOO": "bar baz $x 'q' `y`\n", "B_2": ""}}, stdout: "bar baz $x 'q' `y`\n|"},
		{name: "env with args", req: podssh.ExecRequest{Command: "sh", Args: []string{"-c", `printf %s "$X"`}, Env: map[string]string{"X": "1"}}, stdout: "1"},
		{name: "exit code", req: podssh.ExecRequest{Command: "exit 7"}, code: 7},
		{name: "stderr", req: podssh.ExecRequest{Command: "echo out; echo oops >&2; exit 3"}, stdout: "out\n", stderr: "oops\n", code: 3},
		{name: "stdin", req: podssh.ExecRequest{Command: "cat", Args: []string{}, Stdin: strings.NewReader("hello\nworld")}, stdout: "hello\nworld"},
		{name: "dir", req: podssh.ExecRequest{Command: "pwd", Dir: "/tmp"}, stdout: "/tmp\n"},
		{name: "default dir is workspace", req: podssh.ExecRequest{Command: "pwd"}, stdout: sb.target.Workspace + "\n"},
		{name: "output limit", req: podssh.ExecRequest{Command: "head -c 300000 /dev/zero | tr '\\0' a; echo done >&2", OutputLimit: 1000}, stdout: strings.Repeat("a", 1000), stderr: "done\n", truncated: true},
		{name: "killed by signal", req: podssh.ExecRequest{Command: "kill -KILL $$"}, code: 128 + 9, signal: "KILL"},
		{name: "missing program", req: podssh.ExecRequest{Command: "/nonexistent/prog", Args: []string{}}, code: 127, stderr: "*"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			res, err := sb.pool.Exec(ctx, sb.target, tc.req)
			if err != nil {
				t.Fatalf("Exec(%q): %v", tc.req.Command, err)
			}
			if got := string(res.Stdout); got != tc.stdout {
				t.Errorf("stdout = %q, want %q", got, tc.stdout)
			}
			if got := string(res.Stderr); got != tc.stderr && !(tc.stderr == "*" && got != "") {
				t.Errorf("stderr = %q, want %q", got, tc.stderr)
			}
			if res.ExitCode != tc.code || res.Signal != tc.signal {
				t.Errorf("exit = %d signal %q, want %d signal %q", res.ExitCode, res.Signal, tc.code, tc.signal)
			}
			if res.StdoutTruncated != tc.truncated || res.StderrTruncated {
				t.Errorf("truncated = %v/%v, want %v/false", res.StdoutTruncated, res.StderrTruncated, tc.truncated)
			}
			if res.TimedOut {
				t.Errorf("TimedOut = true, want false")
			}
		})
	}

	t.Run("large stdin", func(t *testing.T) {
		in := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
		res, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{Command: "wc -c", Stdin: bytes.NewReader(in)})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSpace(string(res.Stdout)); got != fmt.Sprint(len(in)) {
			t.Errorf("wc -c = %q, want %d", got, len(in))
		}
	})

	t.Run("bad env name", func(t *testing.T) {
		for _, name := range []string{"1X", "A-B", "A B", "", "X=Y", "é"} {
			_, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{Command: "true", Env: map[string]string{name: "v"}})
			if err == nil {
				t.Errorf("env name %q accepted, want error", name)
			}
		}
	})

	t.Run("timeout kills the process group", func(t *testing.T) {
		pidfile := path.Join(sb.target.Workspace, "grandchild.pid")
		start := time.Now()
		res, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{
			Command: fmt.Sprintf("sleep 300 & echo $! > %s; sleep 300", pidfile),
			Timeout: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if !res.TimedOut {
			t.Fatalf("TimedOut = false (exit %d, signal %q, stderr %q), want true", res.ExitCode, res.Signal, res.Stderr)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Errorf("took %v, want about 1s", d)
		}
		assertGone(t, sb, pidfile)
	})

	t.Run("cancel kills the process group", func(t *testing.T) {
		pidfile := path.Join(sb.target.Workspace, "cancel.pid")
		ctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Second, cancel)
		_, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{
			Command: fmt.Sprintf("sleep 300 & echo $! > %s; sleep 300", pidfile),
		})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err = %v, want context.Canceled", err)
		}
		assertGone(t, sb, pidfile)
	})

	t.Run("concurrent on one connection", func(t *testing.T) {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := range 16 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{Command: "echo", Args: []string{fmt.Sprint(i)}})
				if err == nil && string(res.Stdout) != fmt.Sprintf("%d\n", i) {
					err = fmt.Errorf("stdout %q, want %d", res.Stdout, i)
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})
}

// assertGone waits for the pid in pidfile to disappear.
func assertGone(t *testing.T, sb *sandbox, pidfile string) {
	t.Helper()
	waitfor.Cond(t, 5*time.Second, "the grandchild from "+pidfile+" ending", func() bool {
		res, err := sb.pool.Exec(context.Background(), sb.target, podssh.ExecRequest{
			Command: fmt.Sprintf("pid=$(cat %s) && test -n \"$pid\" && kill -0 $pid 2>/dev/null && ! grep -q '^State:.*Z' /proc/$pid/status", pidfile),
		})
		if err != nil {
			t.Fatal(err)
		}
		return res.ExitCode != 0 // gone (or a zombie awaiting reaping)
	})
}

func TestCommandLineQuoting(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "''"},
		{"a", "'a'"},
		{"it's", `'it'\''s'`},
		{"$HOME `x`", "'$HOME `x`'"},
	} {
		if got := podssh.ShellQuote(tc.in); got != tc.want {
			t.Errorf("ShellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	if _, err := (podssh.ExecRequest{Command: "x", Args: []string{"a\x00b"}}).CommandLine(); err == nil {
		t.Error("NUL in argument accepted")
	}
	if _, err := (podssh.ExecRequest{}).CommandLine(); err == nil {
		t.Error("empty command accepted")
	}
}

// testExecStreams: with stream writers, output reaches them while the
// command still runs (it waits on stdin the test holds open until the
// first line arrived), and nothing is collected in the result.
func testExecStreams(t *testing.T, ctx context.Context, sb *sandbox) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	out := &lineWatch{want: "one\n", seen: make(chan struct{})}
	var errb sshscenario.SyncBuffer
	done := make(chan struct{})
	var res podssh.ExecResult
	var err error
	go func() {
		defer close(done)
		res, err = sb.pool.Exec(ctx, sb.target, podssh.ExecRequest{
			Command: "echo one; echo warn >&2; read x; echo two", Stdin: stdinR,
			StdoutStream: out, StderrStream: &errb,
		})
	}()
	select {
	case <-out.seen:
	case <-done:
		t.Fatalf("command ended (err %v) before its first line reached the stream", err)
	case <-ctx.Done():
		t.Fatal("first line never reached the stream")
	}
	_ = stdinW.Close()
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if got := out.String(); got != "one\ntwo\n" {
		t.Errorf("streamed stdout = %q, want %q", got, "one\ntwo\n")
	}
	if got := errb.String(); got != "warn\n" {
		t.Errorf("streamed stderr = %q, want %q", got, "warn\n")
	}
	if len(res.Stdout) != 0 || len(res.Stderr) != 0 {
		t.Errorf("result kept output %q/%q, want none when streaming", res.Stdout, res.Stderr)
	}
}

// lineWatch closes seen once its content starts with want.
type lineWatch struct {
	sshscenario.SyncBuffer
	want string
	once sync.Once
	seen chan struct{}
}

func (w *lineWatch) Write(p []byte) (int, error) {
	n, err := w.SyncBuffer.Write(p)
	if strings.HasPrefix(w.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, err
}
