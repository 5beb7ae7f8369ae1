package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/sbxedge/sbx/control/apiclient"
)

// terminalMode is how `sbx exec -t` uses the local terminal.
type terminalMode struct {
	// input sends stdin to the remote terminal (-i).
	input bool
	// raw puts the local terminal in raw mode, so every key (Ctrl-C,
	// Ctrl-Z, arrows) reaches the remote terminal as typed: -i with stdin
	// a terminal.
	raw bool
}

// execTerminal runs argv on a pseudo-terminal in the sandbox over the
// API's terminal stream (a WebSocket) and exits with its status. The
// local terminal is restored on every way out: the command's exit, a
// refusal, a cut stream, and SIGINT, SIGTERM or SIGHUP sent to sbx (in
// raw mode Ctrl-C is a key for the remote command, not a signal here).
func (a *app) execTerminal(ctx context.Context, id string, argv []string, workdir string, mode terminalMode) error {
	cl, err := a.api()
	if err != nil {
		return err
	}
	tok, err := a.token()
	if err != nil {
		return err
	}
	// main ends ctx on SIGINT and SIGTERM; a closed terminal (SIGHUP)
	// must restore and hang up too rather than kill sbx outright.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGHUP)
	defer stop()
	// Registered before the first size is read, so no resize is missed.
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	params := apiclient.ExecTerminalStreamParams{Command: ptr(shellLine(argv))}
	if workdir != "" {
		params.Cwd = &workdir
	}
	if cols, rows, ok := a.termSize(); ok {
		params.Cols, params.Rows = &cols, &rows
	}
	if v := os.Getenv("TERM"); v != "" {
		params.Term = &v
	}
	t, err := a.dialTerminal(ctx, cl, tok, id, params)
	if err != nil {
		return err
	}
	defer t.Close()

	if mode.raw {
		fd := int(a.in.(*os.File).Fd())
		old, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("put the terminal in raw mode: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
	}

	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-sctx.Done():
				return
			case <-winch:
				if cols, rows, ok := a.termSize(); ok {
					_ = t.Resize(sctx, cols, rows)
				}
			}
		}
	}()
	if mode.input {
		// Not waited for: a Read of stdin cannot be interrupted, so the
		// pump may stay blocked in it after the command exits. It holds
		// nothing else and sbx exits next (docker and kubectl alike).
		go a.pumpInput(sctx, t, !mode.raw)
	}
	res, err := t.Output(ctx, a.out)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return &exitStatus{code: res.ExitCode}
	}
	return nil
}

// pumpInput sends stdin to the terminal until it ends. Piped into a
// terminal (-itt), its end is typed as Ctrl-D (twice after a partial
// line), which is end-of-file to the remote command as to a local one.
func (a *app) pumpInput(ctx context.Context, t *apiclient.Terminal, eofAsCtrlD bool) {
	buf := make([]byte, 32<<10)
	last := byte('\n')
	for {
		n, err := a.in.Read(buf)
		if n > 0 {
			last = buf[n-1]
			if t.Input(ctx, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) && eofAsCtrlD {
				eof := []byte{4}
				if last != '\n' {
					eof = []byte{4, 4}
				}
				_ = t.Input(ctx, eof)
			}
			return
		}
	}
}

// dialTerminal opens the stream, saying so when the sandbox must wake
// first, and retrying while the API answers "still waking".
func (a *app) dialTerminal(ctx context.Context, cl *apiClient, tok, id string, params apiclient.ExecTerminalStreamParams) (*apiclient.Terminal, error) {
	p := a.wakeNotice(ctx, cl, id)
	defer p.Stop("")
	// The WebSocket runs on the response body of the upgrade, so the
	// transport is the plain one (headerTimeout wraps bodies); the wait
	// for the upgrade is bounded here instead. The API holds the upgrade
	// while the sandbox wakes.
	hc := &http.Client{Transport: a.transport()}
	for attempt := 0; ; attempt++ {
		dctx, cancel := ctx, context.CancelFunc(func() {})
		if a.timeout > 0 {
			dctx, cancel = context.WithTimeoutCause(ctx, a.timeout+wakeHold, &apiTimeoutError{base: cl.base, after: a.timeout + wakeHold})
		}
		t, err := apiclient.DialTerminal(dctx, hc, cl.base, tok, id, params)
		cause := context.Cause(dctx)
		cancel()
		var pe *apiError
		if errors.As(err, &pe) && pe.Code == "sandbox_waking" && attempt < 10 {
			select {
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			case <-time.After(max(pe.RetryAfter, time.Second)):
			}
			continue
		}
		if err != nil && ctx.Err() == nil && cause != nil {
			return nil, cause // the API did not answer in time
		}
		return t, err
	}
}

// termSize is the local terminal's size: stdin's, else stdout's.
func (a *app) termSize() (cols, rows int, ok bool) {
	for _, s := range []any{a.in, a.out} {
		if f, isFile := s.(*os.File); isFile && isTerminal(f) {
			if c, r, err := term.GetSize(int(f.Fd())); err == nil && c > 0 && r > 0 {
				return c, r, true
			}
		}
	}
	return 0, 0, false
}

// shellLine is argv as the one shell line a terminal runs: one word is a
// shell line already (as without -t); more are quoted word by word.
func shellLine(argv []string) string {
	if len(argv) == 1 {
		return argv[0]
	}
	quoted := make([]string, len(argv))
	for i, s := range argv {
		quoted[i] = shellQuote(s)
	}
	return strings.Join(quoted, " ")
}

func ptr[T any](v T) *T { return &v }
