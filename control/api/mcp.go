package api

import (
	"context"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/apiclient"
	"github.com/sbxedge/sbx/control/mcpserver"
)

// mcpBase names the API for the in-process client; requests never leave
// the process, so only its form matters.
const mcpBase = "http://control.internal"

// mcpEndpoint serves /mcp: the MCP tools over Streamable HTTP, each tool
// call sent through api (this router) with the caller's own bearer token,
// so it is authenticated, limited and refused exactly as the REST call it
// mirrors. Every HTTP request to it is authenticated first, as the REST
// API's are: a missing, unknown or revoked token is a 401 with
// WWW-Authenticate, which MCP's authorization rules ask of a server (an
// agent host learns at initialize that its token is bad, not at its
// first tool call).
func (s *Server) mcpEndpoint(api http.Handler) http.Handler {
	client, err := apiclient.New(mcpBase, "", apiclient.InProcess(api))
	if err == nil {
		var h http.Handler
		h, err = mcpserver.Handler(mcpserver.Config{API: client, OpenAPI: openAPIDoc, Logger: s.log, Version: "control", Execs: s.mcpExecs, Observe: s.mcpSessions.observe})
		if err == nil {
			return s.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				// The tool calls' API requests inherit this request's
				// context; they must be routed afresh, not as /mcp.
				h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, nil)))
			}))
		}
	}
	// Only a contract the tools cannot be built from gets here, which the
	// package's tests rule out; serve the failure rather than crash.
	s.log.Error("mcp endpoint disabled", "err", err)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeError(w, r, err) })
}
