package mcpserver

import (
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
func Handler(cfg Config) (http.Handler, error) {
	cfg.Authorization = func(extra *mcp.RequestExtra) string {
		if extra == nil || extra.Header == nil {
			return ""
		}
		return extra.Header.Get("Authorization")
	}
	srv, err := New(cfg)
	if err != nil {
		return nil, err
	}
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless: true, Logger: cfg.Logger, MaxRequestBodyBytes: maxRequestBody,
	}), nil
}
