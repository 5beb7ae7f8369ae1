package mcpserver

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/sbxedge/sbx/control/apiclient"
)

// Long commands. An MCP client gives up on a request after its own
// timeout (60 s in the TypeScript SDK, progress notifications or not,
// unless the host sets resetTimeoutOnProgress), so exec_in_sandbox
// answers within a bound: with how the command ended, or, while it still
// runs, with a handle. The command is owned by Execs, not by the call, so
// it outlives the request that started it; wait_exec, read_exec_output
// and kill_exec reach it by its handle.

// ExecsConfig bounds the commands an Execs holds.
type ExecsConfig struct {
	// Bound is how long exec_in_sandbox and wait_exec wait before they
	// answer with a command still running (default 45 s: below the 60 s
	// request timeout MCP clients default to).
	Bound time.Duration
	// Max is how many commands are held at once, running or ended and not
	// yet forgotten (default 32). At the cap the oldest ended one is
	// forgotten; when all are running a new exec is refused.
	Max int
	// Keep is how long an ended command's output stays readable
	// (default 15 min).
	Keep time.Duration
	// MaxOutput caps the stdout and stderr kept per command, each
	// (default 1 MiB).
	MaxOutput int
}

// DefaultExecBound is ExecsConfig.Bound's default.
const DefaultExecBound = 45 * time.Second

// Execs holds the commands exec_in_sandbox started. Close ends those
// still running and waits for them.
type Execs struct {
	cfg  ExecsConfig
	ctx  context.Context // ends every command at Close
	stop context.CancelFunc
	wg   sync.WaitGroup // one per command's goroutine

	mu     sync.Mutex // guards runs, closed
	runs   map[string]*run
	closed bool
}

// NewExecs makes an empty registry.
func NewExecs(cfg ExecsConfig) *Execs {
	cfg.Bound = cmp.Or(cfg.Bound, DefaultExecBound)
	cfg.Max = cmp.Or(cfg.Max, 32)
	cfg.Keep = cmp.Or(cfg.Keep, 15*time.Minute)
	cfg.MaxOutput = cmp.Or(cfg.MaxOutput, 1<<20)
	ctx, stop := context.WithCancel(context.Background())
	return &Execs{cfg: cfg, ctx: ctx, stop: stop, runs: map[string]*run{}}
}

// Bound is how long a call waits on a command before answering.
func (e *Execs) Bound() time.Duration { return e.cfg.Bound }

// Close ends every running command and waits until each has.
func (e *Execs) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
	e.stop()
	e.wg.Wait()
}

// errKilled is the cause a kill_exec ends a command with.
var errKilled = errors.New("killed by kill_exec")

// run is one command.
type run struct {
	id, owner, sandbox string
	started            time.Time
	cancel             context.CancelCauseFunc

	mu      sync.Mutex // guards everything below
	out     [2]*capped // stdout, stderr
	changed chan struct{}
	ended   bool
	endedAt time.Time
	exit    apiclient.ExecExit
	err     error // the exec failed (a problem), or errKilled
}

var streams = [2]string{"stdout", "stderr"}

// write keeps a piece of output and wakes whoever waits.
func (r *run) write(stream string, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := 0
	if stream == "stderr" {
		i = 1
	}
	r.out[i].write(data)
	close(r.changed)
	r.changed = make(chan struct{})
}

func (r *run) finish(exit apiclient.ExecExit, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ended, r.endedAt, r.exit, r.err = true, time.Now(), exit, err
	close(r.changed)
	r.changed = make(chan struct{})
}

// owner names who may reach a command: the token that started it (only
// a digest is kept). Over stdio every call has the same one.
func owner(authorization string) string {
	sum := sha256.Sum256([]byte(authorization))
	return hex.EncodeToString(sum[:])
}

// start runs exec under the registry. ctx's values are kept (the
// in-process API reads the request's), its end is not: the command
// outlives the call.
func (e *Execs) start(ctx context.Context, who, sandbox string,
	exec func(ctx context.Context, onOutput func(stream string, data []byte)) (apiclient.ExecExit, error)) (*run, error) {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand's contract)
	r := &run{id: "exec-" + hex.EncodeToString(b[:]), owner: who, sandbox: sandbox, started: time.Now(),
		changed: make(chan struct{}),
		out:     [2]*capped{{limit: e.cfg.MaxOutput}, {limit: e.cfg.MaxOutput}}}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil, &toolErr{status: http.StatusServiceUnavailable, code: "shutting_down", detail: "the MCP server is shutting down"}
	}
	e.forgetLocked()
	if len(e.runs) >= e.cfg.Max {
		return nil, &toolErr{status: http.StatusTooManyRequests, code: "too_many_execs",
			detail: fmt.Sprintf("%d commands are running already; wait_exec or kill_exec one of them first", len(e.runs))}
	}
	rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	r.cancel = cancel
	e.runs[r.id] = r
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		stop := context.AfterFunc(e.ctx, func() { cancel(errors.New("the MCP server shut down")) })
		defer stop()
		defer cancel(nil)
		exit, err := exec(rctx, r.write)
		if err != nil && errors.Is(context.Cause(rctx), errKilled) {
			err = errKilled // the stream's read error says less
		}
		r.finish(exit, err)
	}()
	return r, nil
}

// forgetLocked drops ended commands kept longer than Keep and, at the
// cap, the oldest ended one.
func (e *Execs) forgetLocked() {
	oldest, oldestAt := "", time.Time{}
	for id, r := range e.runs {
		r.mu.Lock()
		ended, at := r.ended, r.endedAt
		r.mu.Unlock()
		switch {
		case !ended:
		case time.Since(at) > e.cfg.Keep:
			delete(e.runs, id)
		case oldest == "" || at.Before(oldestAt):
			oldest, oldestAt = id, at
		}
	}
	if len(e.runs) >= e.cfg.Max && oldest != "" {
		delete(e.runs, oldest)
	}
}

// get finds a command the caller may reach.
func (e *Execs) get(who, id string) (*run, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.forgetLocked()
	r, ok := e.runs[id]
	if !ok || r.owner != who {
		return nil, &toolErr{status: http.StatusNotFound, code: "exec_not_found",
			detail: fmt.Sprintf("no command %q: it was never started with this token, or it ended more than %s ago", id, e.cfg.Keep)}
	}
	return r, nil
}

// execStatus is what exec_in_sandbox, wait_exec and kill_exec answer:
// the command's state and its output from the offsets asked for.
type execStatus struct {
	ExecID    string `json:"exec_id" jsonschema:"The command's handle, for wait_exec, read_exec_output and kill_exec."`
	SandboxID string `json:"sandbox_id"`
	Running   bool   `json:"running" jsonschema:"The command still runs: call wait_exec with exec_id and the next offsets."`
	// ExitCode and Signal are set once it ended on its own.
	ExitCode   *int    `json:"exit_code,omitempty"`
	Signal     *string `json:"signal,omitempty"`
	TimedOut   bool    `json:"timed_out" jsonschema:"It ran past its timeout_seconds and was ended."`
	Killed     bool    `json:"killed" jsonschema:"kill_exec ended it."`
	DurationMs int64   `json:"duration_ms" jsonschema:"How long it ran, or has run so far."`

	Stdout         string `json:"stdout" jsonschema:"stdout from stdout_offset on."`
	StdoutEncoding string `json:"stdout_encoding" jsonschema:"utf-8 or base64"`
	StdoutOffset   int    `json:"stdout_offset"`
	StdoutNext     int    `json:"stdout_next_offset" jsonschema:"Where unseen stdout begins: pass it to wait_exec."`
	Stderr         string `json:"stderr"`
	StderrEncoding string `json:"stderr_encoding" jsonschema:"utf-8 or base64"`
	StderrOffset   int    `json:"stderr_offset"`
	StderrNext     int    `json:"stderr_next_offset"`
	// Truncated: the output went past the cap kept per stream.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	Truncated       bool `json:"truncated"`
}

// wait waits until the command ends, d passes or ctx ends, sending each
// piece of output past the offsets to progress as it arrives, and answers
// with its state. A failed exec is its error.
func (r *run) wait(ctx context.Context, d time.Duration, from [2]int, progress func(stream string, data []byte)) (execStatus, error) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	sent := from
	for {
		r.mu.Lock()
		changed, ended := r.changed, r.ended
		var news [2][]byte
		for i, c := range r.out {
			if n := c.buf.Len(); n > sent[i] {
				news[i] = append([]byte(nil), c.buf.Bytes()[sent[i]:]...)
				sent[i] = n
			}
		}
		r.mu.Unlock()
		for i, b := range news {
			if len(b) > 0 && progress != nil {
				progress(streams[i], b)
			}
		}
		if ended {
			break
		}
		select {
		case <-changed:
			continue
		case <-timer.C:
		case <-ctx.Done():
		}
		break
	}
	return r.status(from)
}

// status is the command's state now with its output from the offsets.
func (r *run) status(from [2]int) (execStatus, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ended && r.err != nil && !errors.Is(r.err, errKilled) {
		return execStatus{}, r.err
	}
	s := execStatus{ExecID: r.id, SandboxID: r.sandbox, Running: !r.ended, Killed: errors.Is(r.err, errKilled)}
	if r.ended {
		s.DurationMs = r.endedAt.Sub(r.started).Milliseconds()
		if r.err == nil {
			code := r.exit.ExitCode
			s.ExitCode, s.Signal, s.TimedOut = &code, r.exit.Signal, r.exit.TimedOut
			s.DurationMs = int64(r.exit.DurationMs)
		}
	} else {
		s.DurationMs = time.Since(r.started).Milliseconds()
	}
	s.Stdout, s.StdoutEncoding, s.StdoutOffset, s.StdoutNext = r.slice(0, from[0], -1)
	s.Stderr, s.StderrEncoding, s.StderrOffset, s.StderrNext = r.slice(1, from[1], -1)
	s.StdoutTruncated = r.out[0].truncated || r.exit.StdoutTruncated
	s.StderrTruncated = r.out[1].truncated || r.exit.StderrTruncated
	s.Truncated = s.StdoutTruncated || s.StderrTruncated
	return s, nil
}

// slice is up to limit bytes (all when negative) of stream i from
// offset, encoded, with the offset it begins and the one after it. r.mu
// is held.
func (r *run) slice(i, offset, limit int) (text, encoding string, from, next int) {
	b := r.out[i].buf.Bytes()
	from = min(max(offset, 0), len(b))
	next = len(b)
	if limit >= 0 && next-from > limit {
		next = from + limit
	}
	text, encoding = encode(b[from:next])
	return text, encoding, from, next
}

// kill ends the command and waits up to d for it to have ended.
func (r *run) kill(ctx context.Context, d time.Duration) {
	r.cancel(errKilled)
	_, _ = r.wait(ctx, d, [2]int{}, nil)
}
