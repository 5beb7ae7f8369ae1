package podssh

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// DefaultOutputLimit caps each output stream when ExecRequest.OutputLimit
// is zero.
const DefaultOutputLimit = 1 << 20

// killGrace is how long GNU timeout waits after TERM before sending KILL.
const killGrace = 2 * time.Second

// ExecRequest is one command to run in a sandbox.
type ExecRequest struct {
	// Command is a shell line run by `sh -c` when Args is nil, or the
	// program to run when Args is non-nil (an empty non-nil Args runs the
	// program with no arguments). Program and arguments reach the process
	// verbatim.
	Command string
	Args    []string
	// Env is added to the command's environment. Names must match
	// [A-Za-z_][A-Za-z0-9_]*.
	Env map[string]string
	// Stdin feeds the command. It must reach EOF (or fail) eventually:
	// Exec returns only after it stopped reading it.
	Stdin io.Reader
	// Dir is the working directory; empty means the login directory
	// (Pool.Exec substitutes the workspace).
	Dir string
	// Timeout kills the whole process group (TERM, then KILL after two
	// seconds) when it elapses. Zero means no limit beyond ctx.
	Timeout time.Duration
	// OutputLimit caps each of stdout and stderr in bytes; the rest is
	// read and discarded so the command never blocks on a full pipe.
	// Zero means DefaultOutputLimit.
	OutputLimit int
	// StdoutStream and StderrStream, when set, receive the command's
	// output as it arrives instead of it being collected: the result's
	// Stdout/Stderr stay empty and no limit applies. Each is written from
	// its own goroutine; a write error is ignored (the command is ended by
	// cancelling ctx, not by a reader going away).
	StdoutStream, StderrStream io.Writer
}

// ExecResult is how a command ended.
type ExecResult struct {
	// ExitCode is the exit status, or 128+signal number when the command
	// was killed by a signal (as shells report it).
	ExitCode int
	// Signal names the signal that killed the command ("KILL", "TERM"),
	// empty when it exited.
	Signal                           string
	Stdout, Stderr                   []byte
	StdoutTruncated, StderrTruncated bool
	// TimedOut is set when Timeout elapsed and the command was killed.
	TimedOut bool
	Duration time.Duration
}

// sessionOpenError marks failures before the command started, which are
// safe to retry on a fresh connection.
type sessionOpenError struct{ err error }

func (e *sessionOpenError) Error() string { return "open ssh session: " + e.err.Error() }
func (e *sessionOpenError) Unwrap() error { return e.err }

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ShellQuote quotes s as one word for a POSIX shell: inside single quotes
// nothing is special except the quote itself, which is closed, escaped and
// reopened.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// CommandLine renders req as the line sent in the SSH exec request.
//
// The line first writes its own pid (which, through the execs, becomes the
// pid and process group of the command) as the first line of stderr; Exec
// consumes that line. OpenSSH ignores signal requests for sessions of
// root and others without privilege separation, so to cancel, Exec kills
// the group from a second session instead of relying on them.
//
// The command runs under GNU `timeout`, which puts itself and the command
// in a new process group and relays TERM/INT/HUP (and its own expiry) to
// the whole group, so a timeout or a cancelled call also reaches
// background grandchildren. The environment is set with `export` rather
// than `env K=V prog` because OpenSSH refuses env requests without
// AcceptEnv, and env would misread a program name containing '='.
func (req ExecRequest) CommandLine() (string, error) {
	if req.Command == "" {
		return "", errors.New("exec: empty command")
	}
	if strings.ContainsRune(req.Command, 0) || strings.ContainsRune(req.Dir, 0) {
		return "", errors.New("exec: command or dir contains NUL")
	}
	var b strings.Builder
	b.WriteString(`echo "$$" >&2 && `)
	if req.Dir != "" {
		b.WriteString("cd -- " + ShellQuote(req.Dir) + " && ")
	}
	keys := make([]string, 0, len(req.Env))
	for k, v := range req.Env {
		if !envName.MatchString(k) {
			return "", fmt.Errorf("exec: invalid environment variable name %q", k)
		}
		if strings.ContainsRune(v, 0) {
			return "", fmt.Errorf("exec: environment variable %s contains NUL", k)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b.WriteString("export " + k + "=" + ShellQuote(req.Env[k]) + " && ")
	}
	secs := "0" // timeout 0 never expires but still relays signals to the group
	if req.Timeout > 0 {
		secs = strconv.FormatFloat(req.Timeout.Seconds(), 'f', -1, 64) + "s"
	}
	fmt.Fprintf(&b, "exec timeout -k %d %s ", int(killGrace/time.Second), secs)
	if req.Args == nil {
		b.WriteString("sh -c " + ShellQuote(req.Command))
		return b.String(), nil
	}
	b.WriteString(ShellQuote(req.Command))
	for _, a := range req.Args {
		if strings.ContainsRune(a, 0) {
			return "", errors.New("exec: argument contains NUL")
		}
		b.WriteString(" " + ShellQuote(a))
	}
	return b.String(), nil
}

// Exec runs req on a new session of client and waits for it. Cancelling
// ctx sends TERM to the command's process group and closes the channel.
func Exec(ctx context.Context, client *ssh.Client, req ExecRequest) (ExecResult, error) {
	line, err := req.CommandLine()
	if err != nil {
		return ExecResult{}, err
	}
	sess, err := openSession(ctx, client)
	if err != nil {
		return ExecResult{}, &sessionOpenError{err}
	}
	defer sess.Close()

	limit := req.OutputLimit
	if limit <= 0 {
		limit = DefaultOutputLimit
	}
	stdout := &capBuffer{limit: limit, stream: req.StdoutStream}
	stderr := &capBuffer{limit: limit, stream: req.StderrStream}
	pid := &pidWriter{next: stderr, known: make(chan struct{})}
	sess.Stdout, sess.Stderr = stdout, pid
	if req.Stdin != nil {
		sess.Stdin = req.Stdin
	}
	start := time.Now()
	if err := sess.Start(line); err != nil {
		return ExecResult{}, fmt.Errorf("start command: %w", err)
	}
	waitc := make(chan error, 1) // buffered: the waiter never blocks on send
	go func() { waitc <- sess.Wait() }()

	// Backstop for a sandbox that does not honour the remote timeout
	// (hung, or no GNU timeout): give up on the channel ourselves.
	var backstop <-chan time.Time
	if req.Timeout > 0 {
		t := time.NewTimer(req.Timeout + killGrace + 3*time.Second)
		defer t.Stop()
		backstop = t.C
	}
	var werr error
	forced := false
	select {
	case werr = <-waitc:
	case <-ctx.Done():
		terminate(client, sess, pid, waitc)
		return result(stdout, stderr, start), fmt.Errorf("exec: %w", context.Cause(ctx))
	case <-backstop:
		forced = true
		terminate(client, sess, pid, waitc)
		werr = <-waitc
	}

	res := result(stdout, stderr, start)
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case werr == nil:
	case errors.As(werr, &ee):
		res.ExitCode, res.Signal = exitStatus(ee)
	case forced && (errors.As(werr, &missing) || errors.Is(werr, io.EOF)):
		res.ExitCode = -1
	default:
		return res, fmt.Errorf("wait for command: %w", werr)
	}
	// GNU timeout exits 124 after TERM worked, or dies by / reports KILL
	// when the group outlived the grace period.
	timeoutCode := res.ExitCode == 124 || res.ExitCode == 128+9
	res.TimedOut = forced || (req.Timeout > 0 && timeoutCode && res.Duration >= req.Timeout)
	return res, nil
}

// terminate stops a running command: TERM to its process group, KILL after
// killGrace, then the channel is closed. It leaves waitc's value unread
// for the caller when the command ended, or drains it after closing.
func terminate(client *ssh.Client, sess *ssh.Session, pid *pidWriter, waitc chan error) {
	_ = sess.Signal(ssh.SIGTERM) // honoured by our embedded server, not by every sshd
	select {
	case <-pid.known:
	case <-time.After(time.Second): // the command never got going
	}
	kill := func(sig string) {
		if p := pid.get(); p > 1 {
			killGroup(client, p, sig)
		}
	}
	kill("TERM")
	select {
	case err := <-waitc:
		waitc <- err
		return
	case <-time.After(killGrace):
	}
	kill("KILL")
	sess.Close()
	waitc <- <-waitc
}

// killGroup signals process group pgid from a fresh session on client.
func killGroup(client *ssh.Client, pgid int, sig string) {
	s, err := client.NewSession()
	if err != nil {
		return
	}
	defer s.Close()
	timer := time.AfterFunc(5*time.Second, func() { s.Close() })
	defer timer.Stop()
	_ = s.Run(fmt.Sprintf("kill -s %s -- -%d", sig, pgid))
}

// pidWriter takes the first line of stderr (the command's pid, written by
// the command line) and passes the rest on.
type pidWriter struct {
	next  io.Writer
	mu    sync.Mutex // guards line, pid, done
	line  []byte
	pid   int
	done  bool
	known chan struct{} // closed once the pid line was seen
}

func (w *pidWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.mu.Lock()
	if !w.done {
		i := bytes.IndexByte(p, '\n')
		if i < 0 && len(w.line)+len(p) < 32 {
			w.line = append(w.line, p...)
			w.mu.Unlock()
			return n, nil
		}
		if i >= 0 {
			w.line = append(w.line, p[:i]...)
			p = p[i+1:]
		}
		w.pid, _ = strconv.Atoi(string(w.line))
		w.done = true
		close(w.known)
	}
	w.mu.Unlock()
	if len(p) > 0 {
		return n, writeAll(w.next, p)
	}
	return n, nil
}

func (w *pidWriter) get() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pid
}

func writeAll(w io.Writer, p []byte) error {
	_, err := w.Write(p)
	return err
}

func result(stdout, stderr *capBuffer, start time.Time) ExecResult {
	return ExecResult{
		Stdout: stdout.buf.Bytes(), StdoutTruncated: stdout.truncated,
		Stderr: stderr.buf.Bytes(), StderrTruncated: stderr.truncated,
		Duration: time.Since(start),
	}
}

// exitStatus reads how a command ended: its status, or 128+n and the
// signal's name when signal n killed it (-1 for a signal without number).
func exitStatus(ee *ssh.ExitError) (int, string) {
	sig := ee.Signal()
	if sig == "" {
		return ee.ExitStatus(), ""
	}
	if n, ok := signalNumbers[sig]; ok {
		return 128 + n, sig
	}
	return -1, sig
}

// signalNumbers are the Linux numbers of the signals SSH names (RFC 4254
// section 6.10), used for the shell-style 128+n exit code.
var signalNumbers = map[string]int{
	"HUP": 1, "INT": 2, "QUIT": 3, "ILL": 4, "ABRT": 6, "FPE": 8, "KILL": 9,
	"USR1": 10, "SEGV": 11, "USR2": 12, "PIPE": 13, "ALRM": 14, "TERM": 15,
}

// capBuffer keeps the first limit bytes and swallows the rest, so the
// remote side never blocks on a stream nobody reads. With a stream it
// passes everything on instead and keeps nothing.
type capBuffer struct {
	limit     int
	buf       bytes.Buffer
	truncated bool
	stream    io.Writer
}

func (c *capBuffer) Write(p []byte) (int, error) {
	if c.stream != nil {
		_, _ = c.stream.Write(p)
		return len(p), nil
	}
	if room := c.limit - c.buf.Len(); room < len(p) {
		c.truncated = true
		if room > 0 {
			c.buf.Write(p[:room])
		}
		return len(p), nil
	}
	return c.buf.Write(p)
}
