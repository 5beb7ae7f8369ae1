package api

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/podssh"
)

type execRequest struct {
	Command        string            `json:"command"`
	Args           []string          `json:"args"`
	Env            map[string]string `json:"env"`
	Cwd            string            `json:"cwd"`
	Stdin          string            `json:"stdin"`
	StdinEncoding  string            `json:"stdin_encoding"`
	TimeoutSeconds *float64          `json:"timeout_seconds"`
	// Stream asks for server-sent events, as Accept: text/event-stream
	// does (for clients that cannot set headers).
	Stream bool `json:"stream"`
}

// execExit is how a command ended: the JSON answer without the output,
// and the final event of a streamed exec.
type execExit struct {
	ExitCode        int     `json:"exit_code"`
	Signal          *string `json:"signal"`
	StdoutTruncated bool    `json:"stdout_truncated"`
	StderrTruncated bool    `json:"stderr_truncated"`
	Truncated       bool    `json:"truncated"`
	TimedOut        bool    `json:"timed_out"`
	DurationMS      int64   `json:"duration_ms"`
}

type execResponse struct {
	Stdout         string `json:"stdout"`
	Stderr         string `json:"stderr"`
	StdoutEncoding string `json:"stdout_encoding"`
	StderrEncoding string `json:"stderr_encoding"`
	execExit
}

func newExecExit(res podssh.ExecResult) execExit {
	return execExit{
		ExitCode: res.ExitCode, StdoutTruncated: res.StdoutTruncated, StderrTruncated: res.StderrTruncated,
		Truncated: res.StdoutTruncated || res.StderrTruncated, TimedOut: res.TimedOut,
		DurationMS: res.Duration.Milliseconds(), Signal: optional(res.Signal),
	}
}

const defaultExecTimeout = 60 * time.Second

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// exec runs a command and answers with its output once it ended, or
// streams the output as server-sent events (see streamExec).
func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	req, stream, ok := s.decodeExec(w, r)
	if !ok {
		return
	}
	epoch := s.streams.Epoch() // before the sandbox is checked
	sb, t, err := s.sandboxTarget(r)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if req.Dir, err = lifecycle.ExecDir(t.Workspace, req.Dir); err != nil {
		writeError(w, r, err)
		return
	}
	took := s.metrics.exec.WithLabelValues(sb.AccountID, sb.Platform)
	if stream {
		s.streamExec(w, r, t, req, took, epoch)
		return
	}
	// A long command ends with its authority too (see streamauth.go).
	ctx, _, sw, ok := s.watchStream(w, r, t.SandboxID, inSandbox, epoch)
	if !ok {
		return
	}
	defer sw.done()
	res, err := s.pods.Exec(ctx, t, req)
	if err != nil {
		if se, ended := sw.failed(ctx); ended {
			writeProblem(w, r, se.p)
			return
		}
		writeError(w, r, err)
		return
	}
	took.Observe(res.Duration.Seconds())
	out := execResponse{execExit: newExecExit(res)}
	out.Stdout, out.StdoutEncoding = encodeOutput(res.Stdout)
	out.Stderr, out.StderrEncoding = encodeOutput(res.Stderr)
	writeJSON(w, http.StatusOK, out)
}

// decodeExec reads and checks an exec request body; on failure it has
// answered with a problem. stream reports whether the caller asked for
// server-sent events.
func (s *Server) decodeExec(w http.ResponseWriter, r *http.Request) (_ podssh.ExecRequest, stream, ok bool) {
	var req execRequest
	if !s.decode(w, r, &req) {
		return podssh.ExecRequest{}, false, false
	}
	fail := func(field, detail string) (podssh.ExecRequest, bool, bool) {
		writeProblem(w, r, unprocessable(field, detail))
		return podssh.ExecRequest{}, false, false
	}
	if strings.TrimSpace(req.Command) == "" {
		return fail("command", "is required")
	}
	timeout := defaultExecTimeout
	if req.TimeoutSeconds != nil {
		t := time.Duration(*req.TimeoutSeconds * float64(time.Second))
		if t <= 0 || t > s.cfg.MaxExecTimeout {
			return fail("timeout_seconds", "must be positive and at most "+s.cfg.MaxExecTimeout.String())
		}
		timeout = t
	}
	for k, v := range req.Env {
		if !envNameRE.MatchString(k) || strings.ContainsRune(v, 0) {
			return fail("env", fmt.Sprintf("%q: names must match %s and values must not contain NUL", k, envNameRE))
		}
	}
	if strings.ContainsRune(req.Command, 0) || slices.ContainsFunc(req.Args, func(a string) bool { return strings.ContainsRune(a, 0) }) {
		field := "command"
		if !strings.ContainsRune(req.Command, 0) {
			field = "args"
		}
		return fail(field, "must not contain NUL bytes")
	}
	var stdin []byte
	switch req.StdinEncoding {
	case "", "utf-8":
		stdin = []byte(req.Stdin)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(req.Stdin)
		if err != nil {
			return fail("stdin", "is not valid base64")
		}
		stdin = b
	default:
		return fail("stdin_encoding", `must be "utf-8" or "base64"`)
	}
	stream = req.Stream || strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	return podssh.ExecRequest{
		// Dir is the cwd as asked; exec resolves it in the workspace.
		Command: req.Command, Args: req.Args, Env: req.Env, Dir: req.Cwd, Stdin: bytes.NewReader(stdin),
		Timeout: timeout, OutputLimit: s.cfg.ExecOutputLimit,
	}, stream, true
}

// encodeOutput keeps text readable and binary intact: JSON strings cannot
// carry invalid UTF-8, so such output is sent as base64.
func encodeOutput(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// target resolves the URL's sandbox to its pod, refusing states in which
// there is no pod to talk to.
func (s *Server) target(r *http.Request) (podssh.Target, error) {
	_, t, err := s.sandboxTarget(r)
	return t, err
}

// sandboxTarget is target with the sandbox it reaches (for labels).
func (s *Server) sandboxTarget(r *http.Request) (store.Sandbox, podssh.Target, error) {
	sb, err := s.life.Get(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		return store.Sandbox{}, podssh.Target{}, err
	}
	if sb, err = s.awaken(r, sb); err != nil {
		return store.Sandbox{}, podssh.Target{}, err
	}
	if lifecycle.AdmissionOf(sb) != lifecycle.Ready {
		return store.Sandbox{}, podssh.Target{}, &lifecycle.StateError{State: string(sb.State), Action: "reach"}
	}
	return sb, podssh.Target{
		SandboxID: sb.ID, Addr: sb.Endpoint, User: sb.SSHUser, HostKey: sb.HostKey, Workspace: sb.Workspace,
	}, nil
}
