package api

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/connlog"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/problem"
)

// errShuttingDown ends streams open when control stops; an exec, terminal
// or followed-log stream it ended is told shuttingDown last. A sandbox's
// event stream just ends: it resumes from Last-Event-ID on another
// replica, and an error event would tell its client to stop instead.
var (
	errShuttingDown = errors.New("control is shutting down")
	shuttingDown    = problem.New(http.StatusServiceUnavailable, "shutting_down",
		"control is shutting down; this stream and any command it ran were ended")
)

// execChunk is the data of a stdout or stderr event: the bytes as they
// were produced, as text when they are UTF-8 and base64 otherwise.
type execChunk struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
}

// streamExec runs req and sends its output as server-sent events while it
// is produced: "stdout" and "stderr" events carrying execChunk, then one
// "exit" event carrying execExit, or an "error" event carrying a problem
// document when the command could not be run to its end. A client that
// goes away cancels the request's context, which ends the command's
// process group (podssh.Exec). The open request counts as activity and
// woke the sandbox in target, as a plain exec does. took records the
// duration of a command that ran to its end. When the sandbox ends or is
// suspended, or the token is revoked, the command is ended and the last
// event is an "error" saying so (streamauth.go); epoch is the
// invalidation epoch read before target checked the sandbox.
func (s *Server) streamExec(w http.ResponseWriter, r *http.Request, t podssh.Target, req podssh.ExecRequest, took prometheus.Observer, epoch uint64) {
	ctx, _, sw, ok := s.watchStream(w, r, t.SandboxID, inSandbox, epoch)
	if !ok {
		return
	}
	defer sw.done()
	sw.endOnShutdown()
	rec := s.recordStream(r, connlog.KindExec, t.SandboxID)
	defer func() { rec.Close(endReason(ctx)) }()

	sse := newSSE(w)
	stopKeepAlive := sse.keepAlive(keepAlive)
	stdout := &chunkWriter{sse: sse, event: "stdout", counted: rec.AddOut}
	stderr := &chunkWriter{sse: sse, event: "stderr", counted: rec.AddOut}
	req.StdoutStream, req.StderrStream = stdout, stderr
	res, err := s.pods.Exec(ctx, t, req)
	stopKeepAlive()
	stdout.flush()
	stderr.flush()
	var gone *streamEnded
	ended := false
	// A command killed by a signal may have been killed by its sandbox's
	// end (the provider ends every process of a destroyed sandbox), its
	// exit-signal arriving before the session breaks: that is the end of
	// the sandbox, and the client is told so, as for a broken session.
	if (err != nil || res.Signal != "") && r.Context().Err() == nil {
		gone, ended = sw.failed(ctx)
	}
	switch {
	case err != nil && r.Context().Err() != nil:
		logger(r).InfoContext(r.Context(), "exec stream: client went away; command ended", "sandbox_id", t.SandboxID)
	case ended:
		sse.event("error", gone.p)
	case err != nil && errors.Is(context.Cause(ctx), errShuttingDown):
		sse.event("error", shuttingDown)
	case err != nil:
		sse.event("error", toProblem(r, err))
	default:
		took.Observe(res.Duration.Seconds())
		sse.event("exit", newExecExit(res))
	}
}

// sse writes server-sent events; its methods may be called from several
// goroutines. After a failed write it drops everything: the client is
// gone and the request's context says so.
type sse struct {
	mu     sync.Mutex // guards w, rc, failed
	w      http.ResponseWriter
	rc     *http.ResponseController
	failed bool
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, rc: http.NewResponseController(w)}
	s.write("") // sends the headers now: the client knows the command started
	return s
}

func (s *sse) event(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(errInternal)
	}
	s.write(fmt.Sprintf("event: %s\ndata: %s\n\n", name, data))
}

func (s *sse) write(text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failed {
		return
	}
	if text != "" {
		if _, err := fmt.Fprint(s.w, text); err != nil {
			s.failed = true
			return
		}
	}
	if err := s.rc.Flush(); err != nil {
		s.failed = true
	}
}

// keepAlive sends a comment every interval so proxies with idle timeouts
// keep a silent command's stream open. The returned stop waits for the
// goroutine.
func (s *sse) keepAlive(interval time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-tick.C:
				s.write(": keep-alive\n\n")
			case <-quit:
				return
			}
		}
	}()
	return func() { close(quit); <-done }
}

// chunkWriter turns one output stream into events. A UTF-8 sequence split
// across two reads is held back until it is whole, so text stays text.
// Writes come from one goroutine (the SSH session's copier for the
// stream); flush is called after the command ended.
type chunkWriter struct {
	sse     *sse
	event   string
	pending []byte
	// counted is told how many bytes the command wrote (the log's bytes
	// out).
	counted func(int64)
}

func (c *chunkWriter) Write(p []byte) (int, error) {
	if c.counted != nil {
		c.counted(int64(len(p)))
	}
	buf := append(c.pending, p...)
	head, tail := splitRune(buf)
	c.pending = append([]byte(nil), tail...)
	c.send(head)
	return len(p), nil
}

func (c *chunkWriter) flush() {
	c.send(c.pending)
	c.pending = nil
}

func (c *chunkWriter) send(b []byte) {
	if len(b) == 0 {
		return
	}
	ch := execChunk{Data: string(b), Encoding: "utf-8"}
	if !utf8.Valid(b) {
		ch = execChunk{Data: base64.StdEncoding.EncodeToString(b), Encoding: "base64"}
	}
	c.sse.event(c.event, ch)
}

// splitRune splits off an incomplete UTF-8 sequence at the end of b.
func splitRune(b []byte) (head, tail []byte) {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax+1; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i], b[i:]
			}
			break
		}
	}
	return b, nil
}
