package main

import (
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	controlapi "github.com/sbxedge/sbx/control/api"
	"github.com/sbxedge/sbx/control/mcpserver"
)

const mcpLong = `sbx mcp is an MCP (Model Context Protocol) server on stdin and stdout, for an
agent host to launch as a subprocess. Its tools mirror the REST API and act with
this CLI's API and token (--api, SBX_API, SBX_TOKEN, sbx login); a refused call is
a tool error carrying the API's problem (type, status, detail).

The same tools are served over Streamable HTTP by the API itself at /mcp.`

// mcpHelp is the long help with the tools the server registers, read from
// the server itself so the list cannot fall behind it.
func mcpHelp() string {
	tools, err := mcpserver.Tools(controlapi.OpenAPI())
	if err != nil {
		return mcpLong + "\n\n(the tool list could not be built: " + err.Error() + ")"
	}
	width := 0
	for _, t := range tools {
		width = max(width, len(t.Name))
	}
	var b strings.Builder
	b.WriteString(mcpLong + "\n\nTools:\n")
	for _, t := range tools {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, t.Name, t.Title)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func newMCPCmd(a *app) *cobra.Command {
	var execBound time.Duration
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the sandbox tools to an agent over MCP on stdin/stdout",
		Long:  mcpLong,
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
			execs := mcpserver.NewExecs(mcpserver.ExecsConfig{Bound: execBound})
			defer execs.Close() // commands still running end with the server
			srv, err := mcpserver.New(mcpserver.Config{API: client, OpenAPI: controlapi.OpenAPI(), Version: version, Execs: execs,
				Logger: slog.New(slog.NewTextHandler(a.errw, &slog.HandlerOptions{Level: level}))})
			if err != nil {
				return err
			}
			return srv.Run(c.Context(), &mcp.IOTransport{Reader: io.NopCloser(a.in), Writer: nopWriteCloser{a.out}})
		},
	}
	cmd.Flags().DurationVar(&execBound, "exec-bound", mcpserver.DefaultExecBound,
		"how long exec_in_sandbox and wait_exec wait on a command before answering with its handle (keep it below the client's request timeout)")
	// The tool list is built only when help is shown: it parses the
	// contract, which no other command run should pay for.
	cmd.SetHelpFunc(func(c *cobra.Command, args []string) {
		c.Long = mcpHelp()
		c.Parent().HelpFunc()(c, args)
	})
	return cmd
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
