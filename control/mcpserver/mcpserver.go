// Package mcpserver is the MCP face of the sandbox API: one tool per REST
// operation an agent needs, built on the official MCP Go SDK. Tools call
// the REST API through the generated client (control/apiclient), so
// authentication, quotas, validation and problems are the API's own. The
// same server runs behind control's /mcp (Streamable HTTP, acting with
// each request's bearer token, the API served in-process) and behind
// `sbx mcp` (stdio, acting with the CLI's configured token).
package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/internal/jsonbody"
	"github.com/sbxedge/sbx/internal/problem"
)

// Config is what a server needs.
type Config struct {
	// API is the REST API the tools call.
	API *apiclient.ClientWithResponses
	// OpenAPI is the API's contract; tool input schemas are taken from it.
	OpenAPI []byte
	// Authorization returns the Authorization header a tool call acts
	// with, from the MCP request's transport (the HTTP request's own
	// header); nil when API authenticates itself (stdio).
	Authorization func(extra *mcp.RequestExtra) string
	// MaxFileBytes bounds file content carried inside a tool call, either
	// way (default 1 MiB): larger files are refused with the REST endpoint
	// that carries them.
	MaxFileBytes int64
	// Execs holds the commands exec_in_sandbox starts, which outlive the
	// call; its owner closes it. Required.
	Execs *Execs
	// Version is reported to clients.
	Version string
	Logger  *slog.Logger
	// Observe, when set, is told of each message Handler receives over
	// HTTP before it is served, and calls the returned func once it was
	// (the connection log groups them into MCP sessions).
	Observe func(r *http.Request, m Message) (done func())

	// requestContext returns the context of the transport request that
	// carried a call, which also ends the call (set by Handler).
	requestContext func(extra *mcp.RequestExtra) context.Context
}

func (c *Config) setDefaults() {
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = 1 << 20
	}
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate names the first missing field.
func (c *Config) Validate() error {
	switch {
	case c.API == nil:
		return errors.New("mcpserver: API is required")
	case len(c.OpenAPI) == 0:
		return errors.New("mcpserver: OpenAPI is required")
	case c.Execs == nil:
		return errors.New("mcpserver: Execs is required")
	}
	return nil
}

const instructions = `Tools to drive cloud development sandboxes. A typical flow:
create_sandbox (profile: one of list_profiles), wait_sandbox_ready, write_sandbox_file / exec_in_sandbox
(output arrives as progress notifications while the command runs; a command still running after the bound
answers with running: true and an exec_id: call wait_exec until running is false), expose_sandbox_port for
a preview URL, destroy_sandbox when done. Errors are tool errors carrying the API's problem document (type, status, code, detail).`

// New builds the MCP server.
func New(cfg Config) (*mcp.Server, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newContract(cfg.OpenAPI)
	if err != nil {
		return nil, err
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "sbx", Title: "sbx sandboxes", Version: cfg.Version},
		&mcp.ServerOptions{Instructions: instructions, Logger: sdkLogger(cfg.Logger)})
	t := &tools{cfg: cfg, api: cfg.API, srv: srv, execs: cfg.Execs}
	if err := t.register(c); err != nil {
		return nil, err
	}
	return srv, nil
}

// Tools is the tools a server built from this contract offers, in the
// order they are registered: what `sbx mcp --help` lists, so the help
// cannot drift from the server.
func Tools(openAPI []byte) ([]*mcp.Tool, error) {
	// Never called: no tool runs.
	cfg := Config{OpenAPI: openAPI, API: &apiclient.ClientWithResponses{}, Execs: NewExecs(ExecsConfig{})}
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := newContract(cfg.OpenAPI)
	if err != nil {
		return nil, err
	}
	t := &tools{cfg: cfg, api: cfg.API, execs: cfg.Execs, srv: mcp.NewServer(&mcp.Implementation{Name: "sbx", Version: cfg.Version}, nil)}
	if err := t.register(c); err != nil {
		return nil, err
	}
	return t.added, nil
}

// tools holds what the tool handlers share.
type tools struct {
	cfg   Config
	api   *apiclient.ClientWithResponses
	srv   *mcp.Server
	execs *Execs
	// added is every tool registered, in order.
	added []*mcp.Tool
}

// handler runs one tool call; auth authenticates its API requests. It
// returns the value to answer with (json.RawMessage for an API body as
// it came, or a ready *mcp.CallToolResult).
type handler func(ctx context.Context, req *mcp.CallToolRequest, auth apiclient.RequestEditorFn) (any, error)

// withArgs is the handler that reads a call's arguments strictly into an
// A (see decodeArgs) and then calls f with them.
func withArgs[A any](f func(ctx context.Context, req *mcp.CallToolRequest, args A, auth apiclient.RequestEditorFn) (any, error)) handler {
	return func(ctx context.Context, req *mcp.CallToolRequest, auth apiclient.RequestEditorFn) (any, error) {
		var args A
		if err := decodeArgs(req, &args); err != nil {
			return nil, err
		}
		return f(ctx, req, args, auth)
	}
}

// add registers a tool. Server.AddTool leaves the arguments unchecked
// (only the generic mcp.AddTool validates), so each call's arguments are
// checked here against the input schema the tool advertises: a missing
// sandbox_id or a value outside its enum or pattern is the agent's
// mistake, told as such, before any request is made.
func (t *tools) add(tool *mcp.Tool, h handler) {
	in, err := resolveSchema(tool.InputSchema)
	if err != nil {
		panic(fmt.Errorf("tool %s: input schema: %w", tool.Name, err)) // register recovers it
	}
	t.added = append(t.added, tool)
	t.srv.AddTool(tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := checkArgs(in, req.Params.Arguments); err != nil {
			return toolError(err), nil
		}
		if t.cfg.requestContext != nil {
			if rctx := t.cfg.requestContext(req.Extra); rctx != nil {
				var cancel context.CancelCauseFunc
				ctx, cancel = context.WithCancelCause(ctx)
				defer cancel(nil)
				stop := context.AfterFunc(rctx, func() { cancel(errCallerGone) })
				defer stop()
			}
		}
		auth := func(context.Context, *http.Request) error { return nil }
		if t.cfg.Authorization != nil {
			header := t.cfg.Authorization(req.Extra)
			auth = func(_ context.Context, r *http.Request) error {
				if header != "" {
					r.Header.Set("Authorization", header)
				}
				return nil
			}
		}
		out, err := h(ctx, req, auth)
		if err != nil {
			return toolError(err), nil
		}
		if res, ok := out.(*mcp.CallToolResult); ok {
			return res, nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return toolError(fmt.Errorf("encode result: %w", err)), nil
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: string(b)}},
			StructuredContent: json.RawMessage(b),
		}, nil
	})
}

// errCallerGone ends a call whose HTTP request ended.
var errCallerGone = errors.New("the MCP client's request ended")

// argsError is a tool call whose arguments do not fit the tool's schema.
type argsError struct{ err error }

func (e *argsError) Error() string { return "invalid arguments: " + e.err.Error() }

// resolveSchema turns an input schema as the tool carries it (a JSON
// value) into one that validates.
func resolveSchema(schema any) (*jsonschema.Resolved, error) {
	b, err := json.Marshal(schema)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return s.Resolve(&jsonschema.ResolveOptions{ValidateDefaults: true})
}

// checkArgs validates a call's arguments (absent or null: {}) against
// the tool's input schema.
func checkArgs(in *jsonschema.Resolved, raw json.RawMessage) error {
	var v any = map[string]any{}
	if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
		if err := jsonbody.Check(t, nil); err != nil {
			return &argsError{err}
		}
		if err := json.Unmarshal(t, &v); err != nil {
			return &argsError{fmt.Errorf("arguments are not JSON: %w", err)}
		}
	}
	if _, ok := v.(map[string]any); !ok {
		return &argsError{errors.New("arguments must be a JSON object")}
	}
	if err := in.Validate(&v); err != nil {
		return &argsError{err}
	}
	return nil
}

// decodeArgs reads a call's arguments strictly into v.
func decodeArgs(req *mcp.CallToolRequest, v any) error {
	raw := req.Params.Arguments
	if len(bytes.TrimSpace(raw)) == 0 || string(bytes.TrimSpace(raw)) == "null" {
		raw = []byte("{}")
	}
	if err := jsonbody.Decode(raw, v, jsonbody.Options{}); err != nil {
		return &argsError{err}
	}
	return nil
}

// toolProblem is the structured content of a failed call: the API's
// problem document, or one in its shape for failures of the tool itself.
type toolProblem struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title,omitempty"`
	Detail string `json:"detail"`
}

// toolError turns an error into an MCP tool error (isError), so the agent
// reads what went wrong and can act on it, rather than a protocol error.
func toolError(err error) *mcp.CallToolResult {
	var p toolProblem
	var pe *apiclient.ProblemError
	var ae *argsError
	var te *toolErr
	switch {
	case errors.As(err, &pe):
		p = toolProblem{Type: pe.Type, Status: pe.Status, Code: pe.Code, Title: pe.Title, Detail: pe.Detail}
	case errors.As(err, &ae):
		p = toolProblem{Type: problem.TypeBase + "invalid_arguments", Status: http.StatusUnprocessableEntity,
			Code: "invalid_arguments", Detail: ae.Error()}
	case errors.As(err, &te):
		p = toolProblem{Type: problem.TypeBase + te.code, Status: te.status, Code: te.code, Detail: te.detail}
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		p = toolProblem{Type: problem.TypeBase + "timeout", Status: http.StatusGatewayTimeout, Code: "timeout", Detail: err.Error()}
	default:
		p = toolProblem{Type: problem.TypeBase + "tool_failed", Status: http.StatusBadGateway, Code: "tool_failed", Detail: err.Error()}
	}
	text := fmt.Sprintf("error %d %s (%s): %s", p.Status, p.Code, p.Type, p.Detail)
	b, _ := json.Marshal(p)
	return &mcp.CallToolResult{
		IsError:           true,
		Content:           []mcp.Content{&mcp.TextContent{Text: text}},
		StructuredContent: json.RawMessage(b),
	}
}

// toolErr is a refusal by the tool itself (a file too large to carry).
type toolErr struct {
	status       int
	code, detail string
}

func (e *toolErr) Error() string { return e.code + ": " + e.detail }

// restPath names a REST endpoint for messages pointing the agent there.
func restPath(method, path string) string {
	return method + " " + strings.TrimSpace(path)
}

// sdkLogger is the logger the SDK gets: its INFO lines (a session
// started, a request served; three per stateless HTTP request, each with
// an empty session ID) are debug detail for us, and the API's own
// request log already names each call.
func sdkLogger(l *slog.Logger) *slog.Logger {
	if l == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(infoAsDebug{l.Handler()})
}

// infoAsDebug passes records to h with Info lowered to Debug.
type infoAsDebug struct{ h slog.Handler }

func (d infoAsDebug) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, lower(l))
}

func (d infoAsDebug) Handle(ctx context.Context, r slog.Record) error {
	r.Level = lower(r.Level)
	return d.h.Handle(ctx, r)
}

func (d infoAsDebug) WithAttrs(as []slog.Attr) slog.Handler { return infoAsDebug{d.h.WithAttrs(as)} }
func (d infoAsDebug) WithGroup(name string) slog.Handler    { return infoAsDebug{d.h.WithGroup(name)} }

func lower(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}
