package main

import (
	"cmp"
	"fmt"
	"io"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

func newPortsCmd(a *app) *cobra.Command {
	var public, private, hostLocalhost, rm bool
	var label string
	c := &cobra.Command{
		Use:   "ports ID [PORT]",
		Short: "List, expose or unexpose a sandbox's preview ports",
		Long: `Without PORT: list the exposed ports and their preview URLs.
With PORT: expose 127.0.0.1:PORT inside the sandbox at its own URL (printed),
private to your account unless --public; with --rm, stop exposing it. A port
exposed already keeps its URL and its access unless --public or --private
says otherwise, so asking for the URL again changes nothing.

Browsers resolve *.preview.localhost to loopback by themselves; other clients
(wscat, Go or Python programs) may not: connect to 127.0.0.1 and send the
preview host name, e.g. curl --connect-to ::127.0.0.1: URL, or a Host header.`,
		Example: `  sbx ports $ID
  sbx ports $ID 3000 --label web
  sbx ports $ID 5173 --public --host-localhost
  sbx ports $ID 3000 --rm`,
		Args:              args([]string{"ID"}, "PORT"),
		ValidArgsFunction: a.completeSandboxes,
		RunE: func(c *cobra.Command, got []string) error {
			id := got[0]
			if len(got) == 1 {
				if rm || public || private || hostLocalhost || label != "" {
					return usageErrorf(c, "--rm, --public, --private, --host-localhost and --label need a PORT")
				}
				cl, err := a.api()
				if err != nil {
					return err
				}
				var out struct {
					Ports []struct {
						Port       int    `json:"port"`
						Label      string `json:"label"`
						URL        string `json:"url"`
						Access     string `json:"access"`
						HostPolicy string `json:"host_policy"`
					} `json:"ports"`
				}
				b, err := apiclient.Raw(cl.gen.ListPortsWithResponse(c.Context(), id))
				return a.renderAnswer(b, err, &out, func(w io.Writer) error {
					t := newTable(w, "PORT", "LABEL", "ACCESS", "HOST", "URL")
					for _, p := range out.Ports {
						t.row(p.Port, cmp.Or(p.Label, "-"), p.Access, p.HostPolicy, p.URL)
					}
					return t.flush()
				})
			}
			port, err := strconv.Atoi(got[1])
			if err != nil || port < 1 || port > 65535 {
				return usageErrorf(c, "PORT %q: want a port number from 1 to 65535", got[1])
			}
			if rm && (public || private || hostLocalhost || label != "") {
				return usageErrorf(c, "--rm takes no --public, --private, --host-localhost or --label")
			}
			if public && private {
				return usageErrorf(c, "--public and --private: choose one")
			}
			cl, err := a.api()
			if err != nil {
				return err
			}
			if rm {
				_, err := apiclient.Result(cl.gen.UnexposePortWithResponse(c.Context(), id, port))
				return err
			}
			// Only what the flags say: the rest stays as it is on a port
			// exposed already (private and forward on a new one).
			body := apiclient.PortRequest{Port: port}
			switch {
			case public:
				body.Access = ptr(apiclient.PortRequestAccess("public"))
			case private:
				body.Access = ptr(apiclient.PortRequestAccess("private"))
			}
			if label != "" {
				body.Label = &label
			}
			if hostLocalhost {
				body.HostPolicy = ptr(apiclient.PortRequestHostPolicy("localhost"))
			}
			var raw map[string]any
			if err := decodeRaw(&raw)(apiclient.Raw(cl.gen.ExposePortWithResponse(c.Context(), id, body))); err != nil {
				return err
			}
			if a.output == "json" {
				return printJSON(a.out, raw)
			}
			_, err = fmt.Fprintln(a.out, raw["url"])
			return err
		},
	}
	c.Flags().BoolVar(&public, "public", false, "anyone with the URL may open it (default for a new port: your account only)")
	c.Flags().BoolVar(&private, "private", false, "only your account may open it (makes a public port private again)")
	c.Flags().BoolVar(&hostLocalhost, "host-localhost", false, "send Host: localhost:PORT (for dev servers that insist)")
	c.Flags().BoolVar(&rm, "rm", false, "stop exposing PORT")
	c.Flags().StringVar(&label, "label", "", `name the port ("web", "storybook"), shown in lists and on the preview's pages`)
	return c
}
