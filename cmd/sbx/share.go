package main

import (
	"fmt"

	"strconv"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// shareRow is a share link as `sbx share ls` shows it.
type shareRow struct {
	ID          string     `json:"id"`
	Port        int        `json:"port"`
	Note        string     `json:"note"`
	State       string     `json:"state"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   time.Time  `json:"expires_at"`
	FirstUsedAt *time.Time `json:"first_used_at,omitempty"`
}

func newShareCmd(a *app) *cobra.Command {
	var forDur time.Duration
	var note string
	c := &cobra.Command{
		Use:   "share ID PORT --for DURATION",
		Short: "Share one preview port through a link that needs no login",
		Long: `Make a link that opens the exposed PORT of a sandbox in a browser without
signing in, until it expires (--for, one minute to one week) or is revoked
(sbx share rm). The link is printed once: only its hash is kept. Whoever opens
it gets a cookie for that one preview and the link's secret leaves the address
bar. Revoking it closes what it opened within seconds.`,
		Example: `  sbx share $ID 3000 --for 2h --note "design review"
  sbx share ls $ID
  sbx share rm $ID shr-...`,
		Args:              args([]string{"ID", "PORT"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			port, err := strconv.Atoi(got[1])
			if err != nil || port < 1 || port > 65535 {
				return usageErrorf(c, "PORT %q: want a port number from 1 to 65535", got[1])
			}
			if forDur < time.Minute || forDur%time.Minute != 0 {
				return usageErrorf(c, "--for %s: want whole minutes, at least 1m (e.g. 30m, 2h)", forDur)
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			body := apiclient.ShareRequest{ExpiresInMinutes: int(forDur / time.Minute)}
			if note != "" {
				body.Note = &note
			}
			var raw map[string]any
			if err := decodeRaw(&raw)(apiclient.Raw(cl.gen.CreateShareWithResponse(c.Context(), got[0], port, body))); err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.out, raw)
			}
			_, err = fmt.Fprintf(a.out, "%s\n(share %s, until %s; revoke with: sbx share rm %s %s)\n", raw["url"], raw["id"], raw["expires_at"], got[0], raw["id"])
			return err
		},
	}
	c.Flags().DurationVar(&forDur, "for", 0, "how long the link works (1m to 168h)")
	c.Flags().StringVar(&note, "note", "", "who or what the link is for, shown by sbx share ls")
	c.AddCommand(newShareLsCmd(a), newShareRmCmd(a))
	return c
}

// shares lists every share link of the sandbox, port by port.
func (a *app) shares(c *cobra.Command, id string) ([]shareRow, error) {
	cl, err := a.api()
	if err != nil {
		return nil, err
	}
	var ports struct {
		Ports []struct {
			Port int `json:"port"`
		} `json:"ports"`
	}
	if err := decodeRaw(&ports)(apiclient.Raw(cl.gen.ListPortsWithResponse(c.Context(), id))); err != nil {
		return nil, err
	}
	all := []shareRow{}
	for _, p := range ports.Ports {
		var out struct {
			Shares []shareRow `json:"shares"`
		}
		if err := decodeRaw(&out)(apiclient.Raw(cl.gen.ListSharesWithResponse(c.Context(), id, p.Port))); err != nil {
			return nil, err
		}
		all = append(all, out.Shares...)
	}
	return all, nil
}

func newShareLsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "ls ID",
		Short:             "List a sandbox's share links (never their secrets)",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			all, err := a.shares(c, got[0])
			if err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.out, map[string]any{"shares": all})
			}
			t := newTable(a.out, "SHARE", "PORT", "STATE", "EXPIRES", "USED", "NOTE")
			for _, s := range all {
				used := "-"
				if s.FirstUsedAt != nil {
					used = s.FirstUsedAt.Local().Format(time.DateTime)
				}
				t.row(s.ID, s.Port, s.State, s.ExpiresAt.Local().Format(time.DateTime), used, s.Note)
			}
			return t.flush()
		},
	}
}

func newShareRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:               "rm ID SHARE",
		Short:             "Revoke a share link; what it opened is closed within seconds",
		Args:              args([]string{"ID", "SHARE"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			all, err := a.shares(c, got[0])
			if err != nil {
				return err
			}
			for _, s := range all {
				if s.ID == got[1] {
					cl, err := a.api()
					if err != nil {
						return err
					}
					_, err = apiclient.Result(cl.gen.RevokeShareWithResponse(c.Context(), got[0], s.Port, s.ID))
					return err
				}
			}
			return fmt.Errorf("no share link %s on sandbox %s (sbx share ls %s lists them)", got[1], got[0], got[0])
		},
	}
}
