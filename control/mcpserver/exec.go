package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"maps"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
)

// exec starts the command under t.execs and waits for it up to the
// bound: its result when it ended, else its handle with the output so
// far. Each piece of output becomes a progress notification as it
// arrives (when the caller asked for progress). A call that ends (is
// cancelled, or its HTTP request goes) before it answered ends the
// command: nobody holds its handle. Once answered, the command is the
// registry's, and outlives every call.
func (t *tools) exec(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.ExecRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	r, err := t.execs.start(ctx, t.caller(req), args.SandboxID, func(ctx context.Context, onOutput func(string, []byte)) (apiclient.ExecExit, error) {
		return apiclient.ExecStream(ctx, t.api, args.SandboxID, args.ExecRequest, onOutput, auth)
	})
	if err != nil {
		return nil, err
	}
	st, err := r.wait(ctx, t.execs.Bound(), [2]int{}, progressTo(ctx, req))
	if ctx.Err() != nil {
		r.cancel(context.Cause(ctx))
		return nil, context.Cause(ctx)
	}
	return st, err
}

// execRef names a command and the output already seen.
type execRef struct {
	ExecID       string `json:"exec_id"`
	StdoutOffset int    `json:"stdout_offset"`
	StderrOffset int    `json:"stderr_offset"`
}

func (a execRef) from() [2]int { return [2]int{a.StdoutOffset, a.StderrOffset} }

// waitExec waits on a command up to the bound (or wait_seconds, if
// shorter).
func (t *tools) waitExec(ctx context.Context, req *mcp.CallToolRequest, args struct {
	execRef
	WaitSeconds *float64 `json:"wait_seconds"`
}, _ apiclient.RequestEditorFn) (any, error) {
	r, err := t.execs.get(t.caller(req), args.ExecID)
	if err != nil {
		return nil, err
	}
	d := t.execs.Bound()
	if args.WaitSeconds != nil {
		d = min(d, time.Duration(*args.WaitSeconds*float64(time.Second)))
	}
	return r.wait(ctx, d, args.from(), progressTo(ctx, req))
}

// killExec ends a command and answers once it has (or after 10 s).
func (t *tools) killExec(ctx context.Context, req *mcp.CallToolRequest, args execRef, _ apiclient.RequestEditorFn) (any, error) {
	r, err := t.execs.get(t.caller(req), args.ExecID)
	if err != nil {
		return nil, err
	}
	r.kill(ctx, 10*time.Second)
	return r.status(args.from())
}

// execOutput is read_exec_output's result.
type execOutput struct {
	ExecID     string `json:"exec_id"`
	Stream     string `json:"stream"`
	Data       string `json:"data"`
	Encoding   string `json:"encoding" jsonschema:"utf-8 or base64"`
	Offset     int    `json:"offset" jsonschema:"Where data begins in the stream."`
	NextOffset int    `json:"next_offset" jsonschema:"Where the next read begins."`
	Size       int    `json:"size" jsonschema:"How much of the stream is kept so far."`
	Running    bool   `json:"running"`
	Truncated  bool   `json:"truncated" jsonschema:"The stream went past the cap kept; what followed is lost."`
}

// maxReadOutput bounds one read_exec_output.
const maxReadOutput = 256 << 10

func (t *tools) readExecOutput(ctx context.Context, req *mcp.CallToolRequest, args struct {
	ExecID string `json:"exec_id"`
	Stream string `json:"stream"`
	Offset int    `json:"offset"`
	Limit  *int   `json:"limit"`
}, _ apiclient.RequestEditorFn) (any, error) {
	r, err := t.execs.get(t.caller(req), args.ExecID)
	if err != nil {
		return nil, err
	}
	i := 0
	if args.Stream == "stderr" {
		i = 1
	}
	limit := maxReadOutput
	if args.Limit != nil {
		limit = min(*args.Limit, maxReadOutput)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	o := execOutput{ExecID: r.id, Stream: streams[i], Size: r.out[i].buf.Len(), Running: !r.ended, Truncated: r.out[i].truncated}
	o.Data, o.Encoding, o.Offset, o.NextOffset = r.slice(i, args.Offset, limit)
	return o, nil
}

// caller names who makes a call, for reaching the commands they started.
func (t *tools) caller(req *mcp.CallToolRequest) string {
	if t.cfg.Authorization == nil {
		return owner("")
	}
	return owner(t.cfg.Authorization(req.Extra))
}

// progressTo sends output to the call's progress token, if it has one.
func progressTo(ctx context.Context, req *mcp.CallToolRequest) func(string, []byte) {
	token := req.Params.GetProgressToken()
	if token == nil {
		return nil
	}
	var sent float64
	return func(stream string, data []byte) {
		sent += float64(len(data))
		msg, enc := encode(data)
		// A client that stopped listening is not a reason to stop the
		// command.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: sent, Message: msg,
			Meta: mcp.Meta{"stream": stream, "encoding": enc},
		})
	}
}

// capped keeps the first limit bytes of a stream.
type capped struct {
	limit     int
	buf       bytes.Buffer
	truncated bool
}

func (c *capped) write(p []byte) {
	if room := c.limit - c.buf.Len(); room < len(p) {
		c.truncated = true
		p = p[:max(room, 0)]
	}
	c.buf.Write(p)
}

// encode keeps text readable and binary intact, as the REST API does.
func encode(b []byte) (string, string) {
	if utf8.Valid(b) {
		return string(b), "utf-8"
	}
	return base64.StdEncoding.EncodeToString(b), "base64"
}

// registerExec adds exec_in_sandbox and the tools that follow a command
// it left running.
func (t *tools) registerExec(exec, id map[string]any, out *outputs) {
	yes := true
	bound := t.execs.Bound().Round(time.Second)
	flow := fmt.Sprintf("Every call answers within %s, below the 60 s request timeout MCP clients default to, so no client setting is "+
		"needed: a command still running then answers running: true with an exec_id; call wait_exec with it (and the *_next_offset "+
		"values, to get only new output) until running is false. Once answered with its exec_id, the command keeps running between calls "+
		"(a cancelled wait_exec does not end it) until kill_exec ends it; an exec_in_sandbox call cancelled before it answered ends its command. A client may instead set resetTimeoutOnProgress (TypeScript SDK) and a longer timeout: the answers still "+
		"come within %s. ", bound, bound)
	t.add(&mcp.Tool{Name: "exec_in_sandbox", Title: "Run a command in a sandbox",
		Description: "Run a command in the sandbox's workspace (POST /api/v1/sandboxes/{id}/exec, streamed). " + flow +
			"The API ends a command after its timeout_seconds (default 60): set it for longer commands. " +
			"With a progress token, stdout and stderr arrive as progress notifications while the call waits " +
			"(message: the output; _meta.stream: stdout or stderr; _meta.encoding: utf-8 or base64). " +
			"Output is kept up to 1 MiB per stream (truncated says when more was lost). A suspended sandbox is woken first.",
		InputSchema:  object(exec, map[string]any{"sandbox_id": id}, "sandbox_id"),
		OutputSchema: typed[execStatus](out),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, OpenWorldHint: &yes},
	}, withArgs(t.exec))

	ref := map[string]any{
		"exec_id":       map[string]any{"type": "string", "description": "The handle exec_in_sandbox answered with."},
		"stdout_offset": map[string]any{"type": "integer", "minimum": 0, "default": 0, "description": "Answer stdout from here (the last answer's stdout_next_offset)."},
		"stderr_offset": map[string]any{"type": "integer", "minimum": 0, "default": 0, "description": "Answer stderr from here (the last answer's stderr_next_offset)."},
	}
	waitArgs := map[string]any{"wait_seconds": map[string]any{"type": "number", "exclusiveMinimum": 0,
		"description": fmt.Sprintf("Wait at most this long (capped at %s).", bound)}}
	maps.Copy(waitArgs, ref)
	t.add(&mcp.Tool{Name: "wait_exec", Title: "Wait for a running command",
		Description: "Wait for a command exec_in_sandbox left running (its streamed POST /api/v1/sandboxes/{id}/exec) to end, " +
			fmt.Sprintf("for at most %s, and answer as exec_in_sandbox does: running: false with exit_code once it ended, ", bound) +
			"else running: true (call wait_exec again). Output from the offsets given arrives in the answer and, with a progress token, as progress notifications.",
		InputSchema:  object(nil, waitArgs, "exec_id"),
		OutputSchema: typed[execStatus](out),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.waitExec))

	t.add(&mcp.Tool{Name: "read_exec_output", Title: "Read a command's output",
		Description: fmt.Sprintf("Read a stretch of a command's stdout or stderr by byte offset (from exec_in_sandbox's streamed "+
			"POST /api/v1/sandboxes/{id}/exec), at most %d bytes a call, without waiting: next_offset is where the next read begins. "+
			"Output stays readable for a while after the command ended.", maxReadOutput),
		InputSchema: object(nil, map[string]any{
			"exec_id": ref["exec_id"],
			"stream":  map[string]any{"type": "string", "enum": []any{"stdout", "stderr"}, "default": "stdout"},
			"offset":  map[string]any{"type": "integer", "minimum": 0, "default": 0},
			"limit":   map[string]any{"type": "integer", "minimum": 1, "maximum": maxReadOutput, "default": maxReadOutput},
		}, "exec_id"),
		OutputSchema: typed[execOutput](out),
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true},
	}, withArgs(t.readExecOutput))

	t.add(&mcp.Tool{Name: "kill_exec", Title: "End a running command",
		Description: "End a command exec_in_sandbox started (its streamed POST /api/v1/sandboxes/{id}/exec request is closed, which " +
			"ends the command in the sandbox) and answer how it ended (killed: true), with its output from the offsets given.",
		InputSchema:  object(nil, ref, "exec_id"),
		OutputSchema: typed[execStatus](out),
		Annotations:  &mcp.ToolAnnotations{DestructiveHint: &yes, IdempotentHint: true},
	}, withArgs(t.killExec))
}
