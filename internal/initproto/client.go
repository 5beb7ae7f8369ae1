package initproto

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/ssh"
)

// Subsystem is the SSH subsystem name the init's control protocol is
// served under: the embedded server of a local sandbox handles it in
// process, a pod's sshd runs the init's control command for it.
const Subsystem = "sbx-init"

// Request is one control call.
type Request struct {
	Op       string    `json:"op"` // sync | put | delete | list | logs | busy
	Services []Service `json:"services,omitempty"`
	Service  *Service  `json:"service,omitempty"`
	Name     string    `json:"name,omitempty"`
	Tail     int       `json:"tail,omitempty"`
	Follow   bool      `json:"follow,omitempty"`
}

// Response answers a Request.
type Response struct {
	Error string `json:"error,omitempty"`
	// Unknown is set with Error when the named service is not run.
	Unknown  bool     `json:"unknown,omitempty"`
	Services []Status `json:"services,omitempty"`
	Lines    []Line   `json:"lines,omitempty"`
	Busy     *Busy    `json:"busy,omitempty"`
}

// Client calls an init over a sandbox's SSH connection.
type Client struct {
	SSH *ssh.Client
}

// ErrNoInit is returned when the sandbox's SSH server does not offer the
// init's subsystem (a sandbox without our init).
var ErrNoInit = errors.New("sandbox has no init (the sbx-init subsystem is not offered)")

// RemoteError is an error the init answered with.
type RemoteError struct {
	Msg     string
	Unknown bool // the service is not run there
}

func (e *RemoteError) Error() string { return "sandbox init: " + e.Msg }

// Is makes a RemoteError for an unknown service match ErrUnknownService.
func (e *RemoteError) Is(target error) bool { return e.Unknown && target == ErrUnknownService }

// Sync pushes the whole declared set.
func (c Client) Sync(ctx context.Context, svcs []Service) ([]Status, error) {
	if svcs == nil {
		svcs = []Service{}
	}
	r, err := c.call(ctx, Request{Op: "sync", Services: svcs})
	return r.Services, err
}

// Put starts or replaces one service.
func (c Client) Put(ctx context.Context, sv Service) ([]Status, error) {
	r, err := c.call(ctx, Request{Op: "put", Service: &sv})
	return r.Services, err
}

// Delete stops one service.
func (c Client) Delete(ctx context.Context, name string) error {
	_, err := c.call(ctx, Request{Op: "delete", Name: name})
	return err
}

// List reports every service.
func (c Client) List(ctx context.Context) ([]Status, error) {
	r, err := c.call(ctx, Request{Op: "list"})
	return r.Services, err
}

// Busy asks the init what work runs in the sandbox.
func (c Client) Busy(ctx context.Context) (Busy, error) {
	r, err := c.call(ctx, Request{Op: "busy"})
	if err != nil {
		return Busy{}, err
	}
	if r.Busy == nil {
		return Busy{}, errors.New("sandbox init: busy: no report")
	}
	return *r.Busy, nil
}

// Logs returns the last tail lines of a service's output.
func (c Client) Logs(ctx context.Context, name string, tail int) ([]Line, error) {
	r, err := c.call(ctx, Request{Op: "logs", Name: name, Tail: tail})
	return r.Lines, err
}

// Follow sends the last tail lines and then every new one to emit, until
// ctx ends, emit fails or the service is removed. accepted, when not nil,
// is called once the init has taken the follow, before any line: a
// stream can answer its client then, even if the service says nothing.
func (c Client) Follow(ctx context.Context, name string, tail int, accepted func() error, emit func(Line) error) error {
	sess, dec, err := c.open(ctx, Request{Op: "logs", Name: name, Tail: tail, Follow: true})
	if err != nil {
		return err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	if _, err := dec.Response(); err != nil {
		return err
	}
	if accepted != nil {
		if err := accepted(); err != nil {
			return err
		}
	}
	for {
		var l Line
		if err := dec.Next(&l); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("read log line: %w", err)
		}
		if err := emit(l); err != nil {
			return err
		}
	}
}

func (c Client) call(ctx context.Context, req Request) (Response, error) {
	sess, dec, err := c.open(ctx, req)
	if err != nil {
		return Response{}, err
	}
	defer sess.Close()
	stop := context.AfterFunc(ctx, func() { sess.Close() })
	defer stop()
	resp, err := dec.Response()
	var remote *RemoteError
	if err != nil && !errors.As(err, &remote) {
		if ctx.Err() != nil {
			return Response{}, fmt.Errorf("init %s: %w", req.Op, context.Cause(ctx))
		}
		return Response{}, fmt.Errorf("init %s: %w", req.Op, err)
	}
	return resp, err
}

func (c Client) open(ctx context.Context, req Request) (*ssh.Session, *Replies, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	sess, err := c.SSH.NewSession()
	if err != nil {
		return nil, nil, fmt.Errorf("open init session: %w", err)
	}
	in, err := sess.StdinPipe()
	if err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("init session stdin: %w", err)
	}
	out, err := sess.StdoutPipe()
	if err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("init session stdout: %w", err)
	}
	if err := sess.RequestSubsystem(Subsystem); err != nil {
		sess.Close()
		if strings.Contains(err.Error(), "request failed") {
			return nil, nil, ErrNoInit
		}
		return nil, nil, fmt.Errorf("request init subsystem: %w", err)
	}
	b, _ := json.Marshal(req) // plain data: cannot fail
	if _, err := in.Write(append(b, '\n')); err != nil {
		sess.Close()
		return nil, nil, fmt.Errorf("send init request: %w", err)
	}
	return sess, NewReplies(out), nil
}

// maxReply bounds one line of an init's answer. The answer comes from
// inside a tenant's sandbox, where anything may stand in for the init:
// a longer line is refused, not buffered. The largest honest one is a
// log tail of 1000 lines of up to 64 KiB (the supervisor's scanner).
const maxReply = 64 << 20

// ErrReplyTooLong is a line of the init's answer over maxReply.
var ErrReplyTooLong = errors.New("sandbox init: answer line too long")

// Replies reads an init's answers: one JSON value a line (the server's
// json.Encoder ends each with a newline).
type Replies struct {
	br  *bufio.Reader
	max int
}

// NewReplies reads answers from r.
func NewReplies(r io.Reader) *Replies { return &Replies{br: bufio.NewReader(r), max: maxReply} }

// Next decodes the next line into v; io.EOF when the stream ends between
// lines. Blank lines are skipped.
func (r *Replies) Next(v any) error {
	for {
		line, err := r.line()
		if len(bytes.TrimSpace(line)) > 0 {
			if jerr := json.Unmarshal(line, v); jerr != nil {
				return fmt.Errorf("sandbox init: malformed answer: %w", jerr)
			}
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// Response reads the answer to a call: the Response, or the init's own
// error as a *RemoteError.
func (r *Replies) Response() (Response, error) {
	var resp Response
	if err := r.Next(&resp); err != nil {
		return Response{}, fmt.Errorf("read init answer: %w", err)
	}
	if resp.Error != "" {
		return resp, &RemoteError{Msg: resp.Error, Unknown: resp.Unknown}
	}
	return resp, nil
}

// line reads up to and including the next newline, or to the end of the
// stream, refusing more than r.max bytes.
func (r *Replies) line() ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.br.ReadSlice('\n')
		if len(line)+len(chunk) > r.max {
			return nil, fmt.Errorf("%w (over %d bytes)", ErrReplyTooLong, r.max)
		}
		line = append(line, chunk...)
		if !errors.Is(err, bufio.ErrBufferFull) {
			return line, err
		}
	}
}
