// Command sbx is the sandbox CLI: it runs the whole stack for development
// (`sbx dev`) and drives sandboxes through the REST API.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const usage = `sbx: cloud development sandboxes

Usage:
  sbx dev [flags]                         run control, provider and edge in one process
  sbx admin [--database-url U] CMD        accounts, flags, limits, projects, tokens (sbx admin --help)
  sbx create [--profile P] [--deadline M] create a sandbox and wait until it is ready
  sbx list                                list your sandboxes
  sbx get ID                              show one sandbox
  sbx events [--follow] ID                lifecycle events as JSON lines (--follow: live until it ends)
  sbx exec [--timeout S] ID -- CMD [ARG...] run a command in the workspace
  sbx files ls ID [PATH]                  list a folder
  sbx files get ID PATH [DEST]            download a file (DEST "-" or absent: stdout)
  sbx files put ID PATH [SRC]             upload a file (SRC absent: stdin)
  sbx files rm [--recursive] ID PATH      delete a file or folder
  sbx extend ID MINUTES                   set the deadline to now + MINUTES
  sbx ssh [--ttl M] ID [SSH ARG...]       ssh into a sandbox with a fresh credential (system ssh)
  sbx ssh-config [--dir D] ID             write a Host entry for VS Code / Cursor Remote-SSH; prints the alias
  sbx ports ID                            list exposed ports and their preview URLs
  sbx ports [--public] ID PORT            expose 127.0.0.1:PORT in the sandbox; prints its URL
  sbx ports --rm ID PORT                  stop exposing PORT
  sbx destroy ID                          destroy a sandbox
  sbx usage                               billable seconds this month

The API commands read SBX_API (default http://127.0.0.1:8080) and SBX_TOKEN
(default: the token file of the default sbx dev data dir), or --api/--token.
Flags come before positional arguments.
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(os.Stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "dev":
		err = runDev(ctx, rest)
	case "admin":
		err = runAdmin(ctx, rest, os.Stdout)
	case "ssh":
		err = runSSH(ctx, rest)
	case "ssh-config":
		err = runSSHConfig(ctx, rest)
	case "create", "list", "get", "events", "exec", "files", "extend", "destroy", "usage", "ports":
		err = runClient(ctx, cmd, rest)
	default:
		fmt.Fprintf(os.Stderr, "sbx: unknown command %q\n\n%s", cmd, usage)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "sbx:", err)
		return 1
	}
	return 0
}
