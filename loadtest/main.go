// Command loadtest measures the system on this machine, each figure as a
// ratio to a baseline measured in the same run. Everything it starts
// listens on 127.0.0.1 and every scenario is bounded in count and time;
// it never targets another host.
//
//	go run ./loadtest ssh [flags]     SSH broker vs a direct connection to the same sshd
//	go run ./loadtest ready [flags]   create→ready split by step, and a preview wake's overhead over the app's start
//	go run ./loadtest preview [flags] preview proxy vs the same upstream direct, via nginx and Caddy, and over its SSH transport alone
//	go run ./loadtest exec [flags]    exec round trip: MCP vs REST vs SSH on an open connection
//	go run ./loadtest private [flags] private preview with a token vs a public port, on control and the edge
//	go run ./loadtest scale [flags]   control + edge binaries, a simulated fleet: memory per session, creates/s, Redis, private preview
//	go run ./loadtest usage [flags]   the usage query over a million ledger rows: hourly rollup vs one pass
//	go run ./loadtest fleet [flags]   2 controls and 3 edges as processes under faults: the fault table
//
// Adding a scenario family: a file with a func(ctx, args) error and a row
// in commands.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

type command struct {
	name, summary string
	run           func(ctx context.Context, args []string) error
	hidden        bool // internal helpers the tool runs as child processes
}

var commands = []command{
	{name: "ssh", summary: "SSH broker vs direct sshd: throughput, CPU/GiB, handshakes/s, keystroke RTT, memory per idle session", run: runSSH},
	{name: "ready", summary: "create→ready in the sbx dev stack, split by step, and a preview wake's overhead over the app's own start", run: runReady},
	{name: "preview", summary: "preview proxy vs direct, nginx, Caddy and its bare SSH transport: 1 KiB req/s, tier CPU per request and p50/p99 at 64 conns, one large download, WebSocket echo RTT", run: runPreview},
	{name: "private", summary: "private preview (account token) vs public port on the real stack (control + edge in process): req/s, p99", run: runPrivPreview},
	{name: "usage", summary: "the usage query on one account with a million ledger rows: the hourly rollup vs one pass over the ledger", run: runUsage},
	{name: "fleet", summary: "2 control + 3 edge processes (real binaries) with private Redis and Postgres; kill -9 an edge, a control, stop Redis, restart Postgres under SSH/PTY/preview/exec traffic: fault table", run: runFleet},
	{name: "scale", summary: "control + edge binaries on Postgres and a private Redis with a simulated fleet: creates/s, edge memory per SSH session and WebSocket, Redis per flush, private preview vs public", run: runScale},
	{name: "exec", summary: "exec round trip: MCP tool vs REST vs SSH exec on an open connection, same run", run: runExec},
	{name: readyAppCmd, summary: "(internal) the woken app of the ready scenario", run: runReadyApp, hidden: true},
	{name: previewChildCmd, summary: "(internal) the preview proxy under test, in its own process", run: runPreviewChild, hidden: true},
	{name: forwarderChildCmd, summary: "(internal) a sandbox's port forwarder, in its own process", run: runForwarderChild, hidden: true},
	{name: brokerChildCmd, summary: "(internal) the broker under test, in its own process", run: runBrokerChild, hidden: true},
	{name: scaleAppCmd, summary: "(internal) the scale scenario's sandbox app, in its own process", run: runScaleApp, hidden: true},
	{name: tcpRelayChildCmd, summary: "(internal) a plain TCP relay, in its own process", run: runTCPRelayChild, hidden: true},
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: go run ./loadtest <scenario> [flags]\n\nscenarios:")
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(os.Stderr, "  %-10s %s\n", c.name, c.summary)
		}
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	for _, c := range commands {
		if c.name == os.Args[1] {
			if err := c.run(ctx, os.Args[2:]); err != nil {
				fmt.Fprintf(os.Stderr, "loadtest %s: %v\n", c.name, err)
				os.Exit(1)
			}
			return
		}
	}
	usage()
	os.Exit(2)
}

// parseConfig parses a scenario's flags (which fill c) and checks c.
func parseConfig(fs *flag.FlagSet, args []string, c interface{ Validate() error }) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	return c.Validate()
}
