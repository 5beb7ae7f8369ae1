package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/internal/apiclient"
)

// exec runs the command through the streamed exec endpoint. Each piece of
// output becomes a progress notification as it arrives (when the caller
// asked for progress); the result holds the output as well, capped.
func (t *tools) exec(ctx context.Context, req *mcp.CallToolRequest, args struct {
	sandboxArgs
	apiclient.ExecRequest
}, auth apiclient.RequestEditorFn) (any, error) {
	token := req.Params.GetProgressToken()
	out := map[string]*capped{"stdout": {limit: t.cfg.MaxExecOutput}, "stderr": {limit: t.cfg.MaxExecOutput}}
	var sent float64
	exit, err := apiclient.ExecStream(ctx, t.api, args.SandboxID, args.ExecRequest, func(stream string, data []byte) {
		out[stream].write(data)
		if token == nil {
			return
		}
		sent += float64(len(data))
		msg, enc := encode(data)
		// A client that stopped listening is not a reason to stop the
		// command; the call's own context says when to.
		_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
			ProgressToken: token, Progress: sent, Message: msg,
			Meta: mcp.Meta{"stream": stream, "encoding": enc},
		})
	}, auth)
	if err != nil {
		return nil, err
	}
	res := apiclient.ExecResult{
		ExitCode: exit.ExitCode, Signal: exit.Signal, TimedOut: exit.TimedOut, DurationMs: exit.DurationMs,
		StdoutTruncated: out["stdout"].truncated, StderrTruncated: out["stderr"].truncated,
	}
	res.Truncated = res.StdoutTruncated || res.StderrTruncated
	var enc string
	res.Stdout, enc = encode(out["stdout"].buf.Bytes())
	res.StdoutEncoding = apiclient.ExecResultStdoutEncoding(enc)
	res.Stderr, enc = encode(out["stderr"].buf.Bytes())
	res.StderrEncoding = apiclient.ExecResultStderrEncoding(enc)
	return res, nil
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
