package main

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// maxExecStdin bounds what `sbx exec` reads from a pipe: the request
// carries stdin whole.
const maxExecStdin = 8 << 20

func newExecCmd(a *app) *cobra.Command {
	var timeout float64
	var tty int
	var interactive, noStdin bool
	var workdir string
	c := &cobra.Command{
		Use:   "exec ID [--] CMD [ARG...]",
		Short: "Run a command in the sandbox's workspace",
		Long: `Run a command in the sandbox's workspace and exit with its status.

One word after the ID is a shell line (run by sh -c, so $VARS and ; work);
two or more are a program and its arguments, passed verbatim. Put the command
after -- when it has flags of its own. Stdin is sent to the command only
with -i (up to 8 MiB), as with docker and kubectl: without it sbx exec reads
nothing, so it runs once per line inside a shell's "while read" loop.

-it runs the command on a terminal in the sandbox (the API's terminal
stream): keys go to it as typed, Ctrl-C included, and window resizes follow.
As with docker and kubectl, -it with stdin not a terminal (a pipe, a file)
runs without a terminal and sends stdin; -itt forces a terminal anyway. -t
alone gives the command a terminal but no input; -i alone sends stdin, read
to its end, even from a terminal. A suspended sandbox is woken first; on a
terminal sbx says so while it waits.

-w runs the command in a folder of the workspace: relative to it, or an
absolute path inside it (a path outside is refused).

-o json waits for the command and prints its result (stdout, stderr,
exit_code, ...) as one JSON object instead of streaming the output.`,
		Example: `  sbx exec $ID -- ls -la
  sbx exec $ID 'uname -a; echo $HOME'
  echo hello | sbx exec -i $ID -- cat
  sbx exec -it $ID -- bash
  sbx exec --timeout 300 $ID -- make test
  sbx exec -w app $ID -- npm test`,
		Args: func(c *cobra.Command, got []string) error {
			if len(got) == 0 {
				return usageErrorf(c, "missing ID and CMD")
			}
			if dash := c.ArgsLenAtDash(); dash == 0 {
				return usageErrorf(c, "the ID goes before --: sbx exec ID -- CMD")
			} else if dash > 1 {
				return usageErrorf(c, "unexpected argument %q before --: sbx exec ID -- CMD", got[1])
			}
			if len(got) < 2 {
				return usageErrorf(c, "missing CMD: sbx exec ID -- CMD [ARG...]")
			}
			return nil
		},
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			id, argv := got[0], got[1:]
			if timeout <= 0 {
				return usageErrorf(c, "--timeout %g: want seconds, more than 0", timeout)
			}
			if interactive && noStdin {
				return usageErrorf(c, "-i sends stdin and --no-stdin sends none: choose one")
			}
			stdinTTY := isTerminal(a.in)
			if tty == 1 && interactive && !stdinTTY {
				// kubectl's rule: a pipe cannot drive a terminal.
				fmt.Fprintln(a.errw, "sbx: stdin is not a terminal; running without one (-itt forces a terminal)")
				tty = 0
			}
			if tty > 0 {
				if a.output == "json" {
					return usageErrorf(c, "-o json gives the command's whole output as one JSON object; a terminal (-t) has none to give")
				}
				if c.Flags().Changed("timeout") {
					return usageErrorf(c, "--timeout applies without a terminal; with -t the command runs until it exits")
				}
				return a.execTerminal(c.Context(), id, argv, workdir, terminalMode{input: interactive, raw: interactive && stdinTTY})
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			gc, err := a.generated(wakeHold)
			if err != nil {
				return err
			}
			req := apiclient.ExecRequest{Command: argv[0], TimeoutSeconds: &timeout}
			if workdir != "" {
				req.Cwd = &workdir
			}
			if len(argv) > 1 {
				args := argv[1:]
				req.Args = &args
			}
			if interactive && a.in != nil {
				if stdinTTY {
					fmt.Fprintln(a.errw, "sbx: reading stdin to its end (Ctrl-D), then running; -it gives an interactive terminal")
				}
				b, err := io.ReadAll(io.LimitReader(a.in, maxExecStdin+1))
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				if len(b) > maxExecStdin {
					return fmt.Errorf("stdin is over %s; use sbx files put for large input", sizeString(maxExecStdin))
				}
				if len(b) > 0 {
					in, enc := string(b), apiclient.ExecRequestStdinEncoding("utf-8")
					if !utf8.Valid(b) {
						in, enc = base64.StdEncoding.EncodeToString(b), "base64"
					}
					req.Stdin, req.StdinEncoding = &in, &enc
				}
			}
			if a.output == "json" {
				return a.execJSON(c.Context(), gc, id, req)
			}
			res, err := a.execStreamed(c.Context(), cl, gc, id, req)
			if err != nil {
				return err
			}
			if res.TimedOut {
				return &timedOutError{msg: fmt.Sprintf("the command timed out after %gs and was killed (--timeout gives it longer)", timeout)}
			}
			if res.ExitCode != 0 {
				return &exitStatus{code: res.ExitCode}
			}
			return nil
		},
	}
	c.Flags().StringVarP(&workdir, "workdir", "w", "", "folder to run in: relative to the workspace, or an absolute path inside it")
	c.Flags().Float64Var(&timeout, "timeout", 60, "seconds before the command's process group is killed (without -t)")
	c.Flags().CountVarP(&tty, "tty", "t", "run on a terminal in the sandbox; -tt even when stdin is not a terminal")
	c.Flags().BoolVarP(&interactive, "interactive", "i", false, "send stdin to the command (with -t: keys as typed)")
	c.Flags().BoolVar(&noStdin, "no-stdin", false, "send no stdin (the default without -i; kept for scripts that pass it)")
	return c
}

// wakeHold is how long a call may be held while a sandbox wakes: the API
// holds up to 60 s, then answers 503 with Retry-After.
const wakeHold = 90 * time.Second

// execStreamed runs one exec with its output streamed to stdout and
// stderr as the command produces it, saying so if the sandbox must wake
// first and retrying while the API answers "still waking" (nothing was
// run then).
func (a *app) execStreamed(ctx context.Context, cl *apiClient, gc *apiclient.ClientWithResponses, id string, req apiclient.ExecRequest) (apiclient.ExecExit, error) {
	p := a.wakeNotice(ctx, cl, id)
	defer p.Stop("")
	started := false
	write := func(stream string, data []byte) {
		if !started {
			started = true
			p.Stop("")
		}
		w := a.out
		if stream == "stderr" {
			w = a.errw
		}
		_, _ = w.Write(data)
	}
	for attempt := 0; ; attempt++ {
		res, err := apiclient.ExecStream(ctx, gc, id, req, write)
		var pe *apiError
		if errors.As(err, &pe) && pe.Code == "sandbox_waking" && attempt < 10 {
			// Each attempt waited a minute at the API: a script, too, is
			// told why nothing has happened yet (on stderr).
			fmt.Fprintf(a.errw, "sbx: %s; retrying (%d of 10)\n", pe.Detail, attempt+1)
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(max(pe.RetryAfter, time.Second)):
			}
			continue
		}
		return res, err
	}
}

// execJSON runs one exec and prints the API's result (stdout, stderr,
// exit_code, ...) as one JSON object for scripts, and exits with the
// command's status like every sbx exec. The API holds the call while the
// sandbox wakes; "still waking" is retried as execStreamed does.
func (a *app) execJSON(ctx context.Context, gc *apiclient.ClientWithResponses, id string, req apiclient.ExecRequest) error {
	for attempt := 0; ; attempt++ {
		r, err := apiclient.Result(gc.ExecInSandboxWithResponse(ctx, id, req))
		var pe *apiError
		if errors.As(err, &pe) && pe.Code == "sandbox_waking" && attempt < 10 {
			fmt.Fprintf(a.errw, "sbx: %s; retrying (%d of 10)\n", pe.Detail, attempt+1)
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(max(pe.RetryAfter, time.Second)):
			}
			continue
		}
		if err != nil {
			return err
		}
		if r.JSON200 == nil {
			return fmt.Errorf("exec: the API answered %s without a result", r.HTTPResponse.Status)
		}
		if err := printJSON(a.out, r.JSON200); err != nil {
			return err
		}
		if r.JSON200.TimedOut {
			return &exitStatus{code: exitTimedOut}
		}
		if r.JSON200.ExitCode != 0 {
			return &exitStatus{code: r.JSON200.ExitCode}
		}
		return nil
	}
}

// wakeNotice looks at the sandbox first: when it is suspended (or on its
// way in or out) the call will wait for a restore, and a person at a
// terminal is told so at once rather than left looking at a silent
// prompt. Scripts see nothing.
func (a *app) wakeNotice(ctx context.Context, cl *apiClient, id string) *progress {
	p := a.newProgress("waking " + id)
	if !isTerminal(a.errw) {
		return p
	}
	sb, err := cl.sandbox(ctx, id)
	if err != nil {
		return p // the call itself will report it
	}
	switch sb.Status {
	case "suspended", "suspending", "restoring":
		fmt.Fprintf(a.errw, "sbx: sandbox %s is %s; waking it (this takes a few seconds)...\n", id, sb.Status)
		p.set("waking %s", id)
	}
	return p
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
