package apiclient

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// event is one server-sent event.
type event struct {
	id, name string
	data     []byte
}

// readEvents calls fn for each event on r until r ends, fn returns false
// or fails. Comments (keep-alives) are skipped.
func readEvents(r io.Reader, fn func(event) (bool, error)) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20) // a chunk of output is one line
	var ev event
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.name == "" && ev.data == nil {
				continue
			}
			more, err := fn(ev)
			if err != nil || !more {
				return err
			}
			ev = event{}
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id:"):
			ev.id = strings.TrimSpace(strings.TrimPrefix(line, "id:"))
		case strings.HasPrefix(line, "event:"):
			ev.name = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			d := strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " ")
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, d...)
		}
	}
	return sc.Err()
}

// openStream checks a streaming answer: a problem document is returned as
// an error (the body closed), anything else but an event stream too.
func openStream(resp *http.Response, err error) (*http.Response, error) {
	if resp, err = Open(resp, err); err != nil {
		return nil, err
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		resp.Body.Close()
		return nil, fmt.Errorf("%s %s: answered %s, want an event stream", resp.Request.Method, resp.Request.URL.Path, ct)
	}
	return resp, nil
}

func acceptEvents(_ context.Context, req *http.Request) error {
	req.Header.Set("Accept", "text/event-stream")
	return nil
}

// Open checks the answer of one of the generated client's plain calls
// (those returning *http.Response) whose body the caller reads as it
// streams: an error status is returned as Check's error, the body read
// and closed; otherwise resp is the caller's to read and close.
func Open(resp *http.Response, err error) (*http.Response, error) {
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, Check(resp, body)
	}
	return resp, nil
}

// problemEvent is the error an "error" event carries: a *ProblemError
// saying why the server ended the stream (token_revoked, sandbox_ended,
// ...).
func problemEvent(stream string, ev event) error {
	p := &ProblemError{}
	if err := json.Unmarshal(ev.data, p); err != nil {
		return fmt.Errorf("%s: error event: %w", stream, err)
	}
	return p
}

// ErrStreamEnded is returned when a stream ends without its final event
// (the connection was cut).
var ErrStreamEnded = errors.New("the stream ended before its final event")

// ExecStream runs req in sandbox id with its output streamed: onOutput
// gets each piece of stdout or stderr as it is produced (stream is
// "stdout" or "stderr"), and the result is how the command ended.
// Cancelling ctx ends the request, which ends the command in the sandbox.
func ExecStream(ctx context.Context, c ClientInterface, id string, req ExecRequest, onOutput func(stream string, data []byte), editors ...RequestEditorFn) (ExecExit, error) {
	resp, err := openStream(c.ExecInSandbox(ctx, id, req, append(editors, acceptEvents)...))
	if err != nil {
		return ExecExit{}, err
	}
	defer resp.Body.Close()
	var exit *ExecExit
	err = readEvents(resp.Body, func(ev event) (bool, error) {
		switch ev.name {
		case "stdout", "stderr":
			var ch ExecChunk
			if err := json.Unmarshal(ev.data, &ch); err != nil {
				return false, fmt.Errorf("exec stream: %s event: %w", ev.name, err)
			}
			data := []byte(ch.Data)
			if ch.Encoding == "base64" {
				if data, err = base64.StdEncoding.DecodeString(ch.Data); err != nil {
					return false, fmt.Errorf("exec stream: %s event: %w", ev.name, err)
				}
			}
			onOutput(ev.name, data)
		case "exit":
			exit = &ExecExit{}
			if err := json.Unmarshal(ev.data, exit); err != nil {
				return false, fmt.Errorf("exec stream: exit event: %w", err)
			}
			return false, nil
		case "error":
			return false, problemEvent("exec stream", ev)
		}
		return true, nil
	})
	if err != nil {
		return ExecExit{}, err
	}
	if exit == nil {
		if ctx.Err() != nil {
			return ExecExit{}, context.Cause(ctx)
		}
		return ExecExit{}, fmt.Errorf("exec stream: %w", ErrStreamEnded)
	}
	return *exit, nil
}

// WatchEvents follows sandbox id's lifecycle events, after event id after
// (0: from the start), calling fn for each until fn returns false or fails
// or the stream ends (the sandbox reached a final state). A stream the
// server ended early (its token revoked) returns its *ProblemError.
// Reconnects are the caller's: the last id fn saw resumes the stream.
func WatchEvents(ctx context.Context, c ClientInterface, id string, after int, fn func(Event) (bool, error), editors ...RequestEditorFn) error {
	return WatchEventsRaw(ctx, c, id, after, func(e Event, _ json.RawMessage) (bool, error) { return fn(e) }, editors...)
}

// WatchEventsRaw is WatchEvents also passing each event's JSON as the API
// sent it, for callers that print it.
func WatchEventsRaw(ctx context.Context, c ClientInterface, id string, after int, fn func(Event, json.RawMessage) (bool, error), editors ...RequestEditorFn) error {
	params := &SandboxEventsParams{}
	if after > 0 {
		params.After = &after
	}
	resp, err := openStream(c.SandboxEvents(ctx, id, params, append(editors, acceptEvents)...))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return readEvents(resp.Body, func(ev event) (bool, error) {
		if ev.name == "error" {
			return false, problemEvent("event stream", ev)
		}
		var e Event
		if err := json.Unmarshal(ev.data, &e); err != nil {
			return false, fmt.Errorf("event stream: event %s: %w", ev.id, err)
		}
		if e.Id == 0 {
			e.Id, _ = strconv.Atoi(ev.id)
		}
		return fn(e, json.RawMessage(ev.data))
	})
}

// LogLine is one line of a service's output, as its log stream sends it.
type LogLine struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// FollowServiceLogs streams service name's output in sandbox id: the last
// tail lines (nil: the server's default), then every new one, calling fn
// for each until fn returns false or fails, ctx ends or the stream ends.
// A stream the server ended (token revoked, sandbox ended or suspended)
// returns its *ProblemError.
func FollowServiceLogs(ctx context.Context, c ClientInterface, id, name string, tail *int, fn func(LogLine) (bool, error), editors ...RequestEditorFn) error {
	follow := true
	resp, err := openStream(c.ServiceLogs(ctx, id, name, &ServiceLogsParams{Tail: tail, Follow: &follow}, append(editors, acceptEvents)...))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	err = readEvents(resp.Body, func(ev event) (bool, error) {
		switch ev.name {
		case "error":
			return false, problemEvent("log stream", ev)
		case "line":
		default:
			return true, nil
		}
		var l LogLine
		if err := json.Unmarshal(ev.data, &l); err != nil {
			return false, fmt.Errorf("log stream: line event: %w", err)
		}
		return fn(l)
	})
	if err != nil && ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}
