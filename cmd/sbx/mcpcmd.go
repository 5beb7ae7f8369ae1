package main

import (
	"io"
	"log/slog"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/internal/mcpserver"
)

func newMCPCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools to an agent over MCP on stdin/stdout",
		Long: `sbx mcp is an MCP (Model Context Protocol) server on stdin and stdout, for an
agent host to launch as a subprocess. Its tools mirror the REST API: create_sandbox,
get_sandbox, list_sandboxes, exec_in_sandbox (output as progress notifications),
read_sandbox_file, write_sandbox_file, list_sandbox_files, expose_sandbox_port,
destroy_sandbox, extend_sandbox and wait_sandbox_ready. They act with this CLI's
API and token (--api, SBX_API, SBX_TOKEN, sbx login); a refused call is a tool
error carrying the API's problem (type, status, detail).

The same tools are served over Streamable HTTP by the API itself at /mcp.`,
		Example: `  # In an agent host's MCP configuration:
  {"command": "sbx", "args": ["mcp"], "env": {"SBX_API": "https://api.example.com"}}`,
		Args: args(nil),
		RunE: func(c *cobra.Command, _ []string) error {
			client, err := a.generated(wakeHold)
			if err != nil {
				return err
			}
			// stdout carries the protocol: logs go to stderr, and only
			// warnings unless --debug.
			level := slog.LevelWarn
			if a.debug {
				level = slog.LevelDebug
			}
			srv, err := mcpserver.New(mcpserver.Config{API: client, OpenAPI: controlapi.OpenAPI(), Version: version,
				Logger: slog.New(slog.NewTextHandler(a.errw, &slog.HandlerOptions{Level: level}))})
			if err != nil {
				return err
			}
			return srv.Run(c.Context(), &mcp.IOTransport{Reader: io.NopCloser(a.in), Writer: nopWriteCloser{a.out}})
		},
	}
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
