package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sbxedge/sbx/internal/jsonbody"
	"github.com/sbxedge/sbx/internal/problem"
)

// maxRequestBody bounds one MCP message over HTTP: a write_sandbox_file
// call carries up to MaxFileBytes of content as base64 (4/3 larger).
const maxRequestBody = 4 << 20

// Handler serves the tools over MCP's Streamable HTTP transport. It is
// stateless: no session lives on the server, so any replica answers any
// request, and each tool call acts with the Authorization header of the
// HTTP request that carried it (the API authenticates it, call by call).
// Progress notifications of a call travel on that call's own response
// stream.
//
// A tool call ends when the HTTP request that carried it does (the agent
// gave up or went away), so an exec it started is ended in the sandbox:
// the SDK ties handler contexts to the request only for the newest
// protocol, so the handler does it for every version.
func Handler(cfg Config) (http.Handler, error) {
	cfg.Authorization = func(extra *mcp.RequestExtra) string {
		if extra == nil || extra.Header == nil {
			return ""
		}
		return extra.Header.Get("Authorization")
	}
	live := &liveRequests{ctxs: map[string]context.Context{}}
	cfg.requestContext = live.lookup
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true, Logger: sdkLogger(cfg.Logger), MaxRequestBodyBytes: maxRequestBody,
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			data, ok := checkBody(w, r)
			if !ok {
				return
			}
			if cfg.Observe != nil {
				defer cfg.Observe(r, parseMessage(data))()
			}
		}
		id := live.add(r.Context())
		defer live.remove(id)
		r.Header.Set(requestIDHeader, id) // ours: whatever the client sent is replaced
		h.ServeHTTP(w, r)
	}), nil
}

// requestIDHeader carries, from the HTTP handler to the tool handlers
// (which see the request's headers), the key of the HTTP request's
// context.
const requestIDHeader = "X-Sbx-Mcp-Request"

// liveRequests are the contexts of the HTTP requests being served.
type liveRequests struct {
	mu   sync.Mutex // guards ctxs, n
	ctxs map[string]context.Context
	n    uint64
}

func (l *liveRequests) add(ctx context.Context) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	id := strconv.FormatUint(l.n, 36)
	l.ctxs[id] = ctx
	return id
}

func (l *liveRequests) remove(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.ctxs, id)
}

func (l *liveRequests) lookup(extra *mcp.RequestExtra) context.Context {
	if extra == nil || extra.Header == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ctxs[extra.Header.Get(requestIDHeader)]
}

// checkBody reads a message bounded and refuses, as a problem document,
// one nested deeper than jsonbody.MaxDepth or with a key twice in one
// object, before the SDK decodes it: the SDK's decoder takes any depth.
// The message is handed on as read.
func checkBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		problem.Write(w, r, problem.New(http.StatusRequestEntityTooLarge, "body_too_large",
			"request body exceeds "+strconv.FormatInt(tooBig.Limit, 10)+" bytes"))
		return nil, false
	case err != nil:
		problem.Write(w, r, problem.New(http.StatusBadRequest, "malformed_json", "read request body: "+err.Error()))
		return nil, false
	}
	var dup *jsonbody.DuplicateKeyError
	switch err := jsonbody.Check(data, nil); {
	case errors.As(err, &dup):
		problem.Write(w, r, problem.New(http.StatusBadRequest, "duplicate_key", err.Error()))
		return nil, false
	case err != nil:
		problem.Write(w, r, problem.New(http.StatusBadRequest, "malformed_json", err.Error()))
		return nil, false
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return data, true
}

// Message is what the connection log reads of one JSON-RPC message: its
// method, the client it names (initialize's clientInfo, or the one every
// request of the stateless protocol carries in _meta, SEP-2575), the
// sandbox a tool call names.
type Message struct {
	Method        string
	ClientName    string
	ClientVersion string
	// SandboxID is a tools/call's sandbox_id argument (every tool acting
	// on one sandbox names it so), as the caller wrote it: an ID or a name.
	SandboxID string
	Size      int
}

// parseMessage reads a Message from a body checkBody already read and
// checked. Only the fields named are decoded (a file's content is skipped,
// not copied); anything else, a batch or a value of the wrong type, leaves
// them empty.
func parseMessage(data []byte) Message {
	var msg struct {
		Method string `json:"method"`
		Params struct {
			ClientInfo clientInfo `json:"clientInfo"`
			Meta       struct {
				ClientInfo clientInfo `json:"io.modelcontextprotocol/clientInfo"`
			} `json:"_meta"`
			Arguments struct {
				SandboxID string `json:"sandbox_id"`
			} `json:"arguments"`
		} `json:"params"`
	}
	// A type error still fills the fields it could: keep them.
	_ = json.Unmarshal(data, &msg)
	m := Message{Method: msg.Method, Size: len(data)}
	info := msg.Params.ClientInfo
	if info.Name == "" {
		info = msg.Params.Meta.ClientInfo
	}
	m.ClientName, m.ClientVersion = info.Name, info.Version
	if msg.Method == "tools/call" {
		m.SandboxID = msg.Params.Arguments.SandboxID
	}
	return m
}

type clientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}
