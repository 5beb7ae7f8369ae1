package main

import (
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

func newWhoCmd(a *app) *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "who ID",
		Short: "Show who is connected to a sandbox, from where, with which client",
		Long: `List the sandbox's open connections from the connection log: SSH connections
(and the kinds of channel each carried), preview browser sessions, terminals
and exec streams, each with its client (vscode, cursor, jetbrains, sbx,
openssh, browser, ...), credential, address, start and bytes each way.
With --all, recent connections that ended are listed too, with why.`,
		Example: `  sbx who $ID
  sbx who $ID --all --json`,
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			cl, err := a.api()
			if err != nil {
				return err
			}
			var params apiclient.ListSandboxConnectionsParams
			if !all {
				live := true
				params.Live = &live
			}
			var out struct {
				Connections []struct {
					Kind       string     `json:"kind"`
					ClientKind string     `json:"client_kind"`
					ClientAddr string     `json:"client_addr"`
					Credential string     `json:"credential"`
					Channels   []string   `json:"channels"`
					StartedAt  time.Time  `json:"started_at"`
					EndedAt    *time.Time `json:"ended_at"`
					BytesIn    int64      `json:"bytes_in"`
					BytesOut   int64      `json:"bytes_out"`
					EndReason  string     `json:"end_reason"`
				} `json:"connections"`
			}
			b, err := apiclient.Raw(cl.gen.ListSandboxConnectionsWithResponse(c.Context(), got[0], &params))
			return a.renderAnswer(b, err, &out, func(w io.Writer) error {
				t := newTable(w, "KIND", "CLIENT", "FROM", "CREDENTIAL", "CHANNELS", "SINCE", "IN", "OUT", "ENDED")
				for _, x := range out.Connections {
					ended := "live"
					if x.EndedAt != nil {
						ended = x.EndReason
					}
					t.row(x.Kind, x.ClientKind, x.ClientAddr, x.Credential, strings.Join(x.Channels, ","),
						x.StartedAt.Local().Format(time.DateTime), x.BytesIn, x.BytesOut, ended)
				}
				return t.flush()
			})
		},
	}
	c.Flags().BoolVar(&all, "all", false, "also list recent connections that ended")
	return c
}
