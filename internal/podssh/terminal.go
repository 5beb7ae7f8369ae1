package podssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// TerminalRequest is an interactive command on a pseudo-terminal.
type TerminalRequest struct {
	// Command is a shell line; empty runs the user's login shell.
	Command string
	// Dir is the working directory (Pool.Terminal: the workspace).
	Dir string
	// Term is the TERM the command sees (default xterm-256color).
	Term       string
	Cols, Rows int
}

// Terminal is a command running on a pseudo-terminal in a sandbox: its
// input and output are the terminal's (stderr is merged into stdout, as
// on any tty). Close ends it.
type Terminal struct {
	sess   *ssh.Session
	stdin  io.WriteCloser
	stdout io.Reader
	waitc  chan error
}

// Terminal starts req on t's pooled connection.
func (p *Pool) Terminal(ctx context.Context, t Target, req TerminalRequest) (*Terminal, error) {
	if req.Dir == "" {
		req.Dir = t.Workspace
	}
	var term *Terminal
	err := p.onConn(ctx, t, func(c *ssh.Client) error {
		var err error
		term, err = StartTerminal(ctx, c, req)
		return err
	})
	return term, err
}

// StartTerminal opens a session on client with a pseudo-terminal and
// starts req in it.
func StartTerminal(ctx context.Context, client *ssh.Client, req TerminalRequest) (*Terminal, error) {
	if strings.ContainsRune(req.Command, 0) || strings.ContainsRune(req.Dir, 0) {
		return nil, errors.New("terminal: command or dir contains NUL")
	}
	if req.Term == "" {
		req.Term = "xterm-256color"
	}
	if req.Cols <= 0 || req.Rows <= 0 {
		req.Cols, req.Rows = 80, 24
	}
	sess, err := openSession(ctx, client)
	if err != nil {
		return nil, &sessionOpenError{err}
	}
	fail := func(what string, err error) (*Terminal, error) {
		sess.Close()
		return nil, fmt.Errorf("terminal: %s: %w", what, err)
	}
	modes := ssh.TerminalModes{ssh.ECHO: 1, ssh.TTY_OP_ISPEED: 38400, ssh.TTY_OP_OSPEED: 38400}
	if err := sess.RequestPty(req.Term, req.Rows, req.Cols, modes); err != nil {
		return fail("request pty", err)
	}
	stdin, err := sess.StdinPipe()
	if err != nil {
		return fail("stdin", err)
	}
	stdout, err := sess.StdoutPipe()
	if err != nil {
		return fail("stdout", err)
	}
	line := ""
	if req.Dir != "" {
		line = "cd -- " + ShellQuote(req.Dir) + " && "
	}
	if req.Command == "" {
		line += `exec "${SHELL:-/bin/sh}" -l`
	} else {
		line += "exec sh -c " + ShellQuote(req.Command)
	}
	if err := sess.Start(line); err != nil {
		return fail("start", err)
	}
	t := &Terminal{sess: sess, stdin: stdin, stdout: stdout, waitc: make(chan error, 1)}
	go func() { t.waitc <- sess.Wait() }() // buffered: never stranded
	return t, nil
}

// Stdin is the terminal's input (keys typed).
func (t *Terminal) Stdin() io.Writer { return t.stdin }

// Stdout is the terminal's output; it ends when the command's side of the
// terminal closes.
func (t *Terminal) Stdout() io.Reader { return t.stdout }

// Resize tells the terminal its new size.
func (t *Terminal) Resize(cols, rows int) error { return t.sess.WindowChange(rows, cols) }

// Signal sends a signal ("INT", "TERM", ...) to the command with an SSH
// signal request. Servers may ignore it (OpenSSH does for unprivileged
// sessions); a Ctrl-C typed on Stdin reaches the foreground job through
// the terminal in any case.
func (t *Terminal) Signal(name string) error { return t.sess.Signal(ssh.Signal(name)) }

// Wait waits for the command and reports how it ended, as Exec does:
// ExitCode is 128+n for a command killed by signal n, and Signal names it.
func (t *Terminal) Wait(ctx context.Context) (ExecResult, error) {
	select {
	case err := <-t.waitc:
		t.waitc <- err
		return exitResult(err)
	case <-ctx.Done():
		return ExecResult{}, context.Cause(ctx)
	}
}

// Close hangs the terminal up: the command gets SIGHUP (as when a
// terminal window closes) and the session ends.
func (t *Terminal) Close() error {
	_ = t.sess.Signal(ssh.SIGHUP)
	return t.sess.Close()
}

func exitResult(err error) (ExecResult, error) {
	var res ExecResult
	var ee *ssh.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.ExitCode, res.Signal = exitStatus(ee)
	default:
		return res, fmt.Errorf("wait for terminal: %w", err)
	}
	return res, nil
}
