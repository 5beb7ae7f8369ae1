package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

func newServicesCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "services ID",
		Short: "List, declare, remove and read the logs of a sandbox's services",
		Long: `Services are long-running programs of a sandbox (a dev server): they start
when the sandbox becomes ready, restart with backoff when they exit, and start
again after every wake. A service with a --port is running only once something
answers on it, and a preview of that port waits for it after a wake.

Without a subcommand: list the services with their state, port, last exit
code and last start.`,
		Example: `  sbx services $ID
  sbx services set $ID web --port 5173 -- npm run dev -- --host 127.0.0.1
  sbx services logs $ID web -f
  sbx services rm $ID web`,
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var out struct {
				Services []apiclient.Service `json:"services"`
			}
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.ListServicesWithResponse(c.Context(), got[0]))); err != nil {
				return err
			}
			return a.render(out, func(w io.Writer) error { return servicesTable(w, out.Services...) })
		}),
	}
	c.AddCommand(newServiceSetCmd(a), newServiceRmCmd(a), newServiceLogsCmd(a))
	return c
}

// servicesTable prints services as sbx services lists them.
func servicesTable(w io.Writer, services ...apiclient.Service) error {
	t := newTable(w, "NAME", "STATE", "PORT", "EXIT", "STARTED")
	for _, s := range services {
		t.row(s.Name, s.State, optInt(s.Port), optInt(s.ExitCode), optTime(s.LastStartAt))
	}
	return t.flush()
}

func optInt(n *int) string {
	if n == nil {
		return "-"
	}
	return strconv.Itoa(*n)
}

func newServiceSetCmd(a *app) *cobra.Command {
	var port int
	var cwd string
	var env []string
	c := &cobra.Command{
		Use:   "set ID NAME [--] COMMAND [ARG...]",
		Short: "Declare or replace a service (restarting it)",
		Long: `Declare service NAME, or replace its declaration, and (re)start it.

One word after NAME is a shell line (run by sh -c); two or more are a
program and its arguments, passed verbatim. Put the command after -- when it
has flags of its own. --port names where it answers (PORT is also set in its
environment); --cwd is relative to the workspace.`,
		Example: `  sbx services set $ID web --port 5173 -- npm run dev -- --host 127.0.0.1
  sbx services set $ID api --env DEBUG=1 --cwd api 'python3 -m http.server $PORT'`,
		Args: func(c *cobra.Command, got []string) error {
			dash := c.ArgsLenAtDash()
			if dash >= 0 && dash < 2 {
				return usageErrorf(c, "ID and NAME go before --: sbx services set ID NAME -- COMMAND")
			} else if dash > 2 {
				return usageErrorf(c, "unexpected argument %q before --: sbx services set ID NAME -- COMMAND", got[2])
			}
			if len(got) < 3 {
				return usageErrorf(c, "missing %s", strings.Join([]string{"ID", "NAME", "COMMAND"}[len(got):], " and "))
			}
			return nil
		},
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			id, name, argv := got[0], got[1], got[2:]
			req := apiclient.ServiceRequest{Command: argv[0]}
			if len(argv) > 1 {
				rest := argv[1:]
				req.Args = &rest
			}
			if c.Flags().Changed("port") {
				if port < 1 || port > 65535 {
					return usageErrorf(c, "--port %d: want a port number from 1 to 65535", port)
				}
				req.Port = &port
			}
			if cwd != "" {
				req.Cwd = &cwd
			}
			if len(env) > 0 {
				m := map[string]string{}
				for _, kv := range env {
					k, v, ok := strings.Cut(kv, "=")
					if !ok || k == "" {
						return usageErrorf(c, "--env %q: want KEY=VALUE", kv)
					}
					m[k] = v
				}
				req.Env = &m
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			var s apiclient.Service
			if err := decodeRaw(&s)(apiclient.Raw(cl.gen.PutServiceWithResponse(c.Context(), id, name, req))); err != nil {
				return err
			}
			return a.render(s, func(w io.Writer) error { return servicesTable(w, s) })
		},
	}
	c.Flags().IntVar(&port, "port", 0, "the port the service answers on (127.0.0.1 or ::1)")
	c.Flags().StringVar(&cwd, "cwd", "", "working directory, relative to the workspace (default: the workspace)")
	c.Flags().StringArrayVar(&env, "env", nil, "KEY=VALUE added to its environment (repeatable)")
	return c
}

func newServiceRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "rm ID NAME",
		Aliases:           []string{"delete"},
		Short:             "Stop a service and remove its declaration",
		Example:           "  sbx services rm $ID web",
		Args:              args([]string{"ID", "NAME"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			_, err := apiclient.Result(cl.gen.DeleteServiceWithResponse(c.Context(), got[0], got[1]))
			return err
		}),
	}
}

func newServiceLogsCmd(a *app) *cobra.Command {
	var follow bool
	var tail int
	c := &cobra.Command{
		Use:   "logs ID NAME",
		Short: "Print a service's output (its last lines; -f follows)",
		Long: `Print the last --tail lines of the service's stdout and stderr, merged,
with the sandbox init's own lines (starts, exits, restarts). -f keeps
printing new lines until interrupted. The sandbox must be ready.

With -o json, JSON lines: one object a line, {"text": LINE}; with -f each
also has "at", when the line was read.`,
		Example:           "  sbx services logs $ID web\n  sbx services logs $ID web -f --tail 20",
		Args:              args([]string{"ID", "NAME"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			if tail < 1 || tail > 1000 {
				return usageErrorf(c, "--tail %d: want lines from 1 to 1000", tail)
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			if !follow {
				body, err := apiclient.Raw(cl.gen.ServiceLogsWithResponse(c.Context(), got[0], got[1], &apiclient.ServiceLogsParams{Tail: &tail}))
				if err != nil {
					return err
				}
				if a.output != "json" {
					_, err = a.out.Write(body)
					return err
				}
				enc := json.NewEncoder(a.out)
				for line := range strings.Lines(string(body)) {
					if err := enc.Encode(logLineJSON{Text: strings.TrimSuffix(line, "\n")}); err != nil {
						return err
					}
				}
				return nil
			}
			enc := json.NewEncoder(a.out)
			return apiclient.FollowServiceLogs(c.Context(), cl.gen, got[0], got[1], &tail, func(l apiclient.LogLine) (bool, error) {
				var err error
				if a.output == "json" {
					err = enc.Encode(logLineJSON{At: &l.At, Text: l.Text})
				} else {
					_, err = fmt.Fprintln(a.out, l.Text)
				}
				return err == nil, err
			})
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted")
	c.Flags().IntVar(&tail, "tail", 100, "how many of the last lines to print first")
	return c
}

// logLineJSON is one line of sbx services logs -o json. The plain answer
// carries no times, so At is there only when following.
type logLineJSON struct {
	At   *time.Time `json:"at,omitempty"`
	Text string     `json:"text"`
}
