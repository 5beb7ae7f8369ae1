package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/coder/websocket"
)

// Terminal is one open terminal stream (GET …/exec/stream): a command on
// a pseudo-terminal in a sandbox. Input and Resize may be called while
// Output runs (the WebSocket allows one reader and concurrent writers);
// Close ends the stream, which hangs the command up.
type Terminal struct {
	conn *websocket.Conn
}

// TerminalExit is how the command on a terminal ended: ExitCode is
// 128+n when signal n (named by Signal) killed it.
type TerminalExit struct {
	ExitCode int     `json:"exit_code"`
	Signal   *string `json:"signal"`
}

// terminalFrame is a text frame of the stream, either way.
type terminalFrame struct {
	Type     string          `json:"type"`
	Cols     int             `json:"cols,omitempty"`
	Rows     int             `json:"rows,omitempty"`
	ExitCode *int            `json:"exit_code,omitempty"`
	Signal   *string         `json:"signal,omitempty"`
	Problem  json.RawMessage `json:"problem,omitempty"`
}

// DialTerminal opens sandbox id's terminal stream on the API at base. The
// token goes in the Authorization header, so no secret is ever in the
// URL (stream tickets are for browsers, which cannot set one). hc's
// transport must hand back 101 bodies unwrapped (the WebSocket runs on
// them). A refusal is the API's *ProblemError, as for every call.
func DialTerminal(ctx context.Context, hc *http.Client, base, token, id string, params ExecTerminalStreamParams) (*Terminal, error) {
	req, err := NewExecTerminalStreamRequest(base, id, &params)
	if err != nil {
		return nil, err
	}
	u := *req.URL
	switch u.Scheme {
	case "http":
		u.Scheme = "ws"
	case "https":
		u.Scheme = "wss"
	}
	hdr := http.Header{}
	if token != "" {
		hdr.Set("Authorization", "Bearer "+token)
	}
	conn, resp, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: hc, HTTPHeader: hdr})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			// The library keeps the first 1 KiB of a refusal's body:
			// enough for a problem document.
			body, _ := io.ReadAll(resp.Body)
			if resp.Request == nil {
				resp.Request = req
			}
			return nil, Check(resp, body)
		}
		return nil, fmt.Errorf("open the terminal stream: %w", err)
	}
	// Terminal output can come in large bursts (a cat of a big file).
	conn.SetReadLimit(1 << 20)
	return &Terminal{conn: conn}, nil
}

// Input sends keys typed (or piped) to the terminal.
func (t *Terminal) Input(ctx context.Context, p []byte) error {
	return t.conn.Write(ctx, websocket.MessageBinary, p)
}

// Resize tells the terminal its new size.
func (t *Terminal) Resize(ctx context.Context, cols, rows int) error {
	b, _ := json.Marshal(terminalFrame{Type: "resize", Cols: cols, Rows: rows})
	return t.conn.Write(ctx, websocket.MessageText, b)
}

// ErrTerminalClosed is a stream that closed without saying how the
// command ended; the error wrapping it carries the close reason.
var ErrTerminalClosed = errors.New("the terminal stream closed before the command exited")

// Output copies the terminal's output to w until the command exits, and
// returns how it did; a command that could not start is the API's
// *ProblemError.
func (t *Terminal) Output(ctx context.Context, w io.Writer) (TerminalExit, error) {
	for {
		typ, data, err := t.conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return TerminalExit{}, context.Cause(ctx)
			}
			if reason := closeReason(err); reason != "" {
				return TerminalExit{}, fmt.Errorf("%w (%s)", ErrTerminalClosed, reason)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				// The library's words for this are about frame headers.
				return TerminalExit{}, fmt.Errorf("%w (the API cut the connection)", ErrTerminalClosed)
			}
			return TerminalExit{}, fmt.Errorf("%w: %w", ErrTerminalClosed, err)
		}
		if typ == websocket.MessageBinary {
			if _, err := w.Write(data); err != nil {
				return TerminalExit{}, fmt.Errorf("write terminal output: %w", err)
			}
			continue
		}
		var f terminalFrame
		if err := json.Unmarshal(data, &f); err != nil {
			return TerminalExit{}, fmt.Errorf("terminal stream: %w", err)
		}
		switch f.Type {
		case "exit":
			if f.ExitCode == nil {
				return TerminalExit{}, errors.New("terminal stream: exit without exit_code")
			}
			t.conn.Close(websocket.StatusNormalClosure, "")
			return TerminalExit{ExitCode: *f.ExitCode, Signal: f.Signal}, nil
		case "error":
			p := &ProblemError{}
			if err := json.Unmarshal(f.Problem, p); err != nil || p.Code == "" {
				return TerminalExit{}, fmt.Errorf("terminal stream: error frame %q", strings.TrimSpace(string(f.Problem)))
			}
			return TerminalExit{}, p
		}
	}
}

// closeReason is the reason the server gave when it closed, if any.
func closeReason(err error) string {
	var ce websocket.CloseError
	if errors.As(err, &ce) {
		if ce.Reason != "" {
			return ce.Reason
		}
		return ce.Code.String()
	}
	return ""
}

// Close ends the stream; the command is hung up (SIGHUP) if it still runs.
func (t *Terminal) Close() error {
	return t.conn.CloseNow()
}
