package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// egressFlags are create's network flags.
type egressFlags struct {
	mode        string
	allow       []string
	credentials []string
}

func (f *egressFlags) register(c *cobra.Command) {
	c.Flags().StringVar(&f.mode, "egress", "", "network policy: open, allowlist or none (default: the profile's; may only narrow it)")
	c.Flags().StringArrayVar(&f.allow, "allow", nil, "with --egress allowlist: a destination allowed (host, *.domain, IP or CIDR, optional :port); repeat")
	c.Flags().StringArrayVar(&f.credentials, "credential", nil, "a credential route the sandbox may use (sbx credentials add); repeat")
}

// apply sets the create body's network and credentials.
func (f *egressFlags) apply(c *cobra.Command, body *apiclient.CreateSandbox) error {
	if f.mode == "" && len(f.allow) > 0 {
		f.mode = "allowlist"
	}
	if f.mode != "" {
		p := apiclient.NetworkPolicy{Egress: apiclient.NetworkPolicyEgress(f.mode)}
		if len(f.allow) > 0 {
			if f.mode != "allowlist" {
				return usageErrorf(c, "--allow needs --egress allowlist, not %q", f.mode)
			}
			p.Allow = &f.allow
		}
		body.Network = &p
	}
	if len(f.credentials) > 0 {
		body.Credentials = &f.credentials
	}
	return nil
}

func newEgressCmd(a *app) *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:   "egress ID",
		Short: "A sandbox's egress log: each outbound connection and what the gateway decided",
		Long: `A sandbox's egress log, newest first: each request its code sent through the
egress gateway, whether it was allowed, denied (and why) or failed, and the
bytes each way. An allowed connection is listed when it ends.`,
		Example:           "  sbx egress $ID\n  sbx egress $ID --limit 200 -o json",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var out struct {
				Decisions []struct {
					Time      time.Time `json:"time"`
					Host      string    `json:"host"`
					Port      int       `json:"port"`
					Verdict   string    `json:"verdict"`
					Reason    *string   `json:"reason"`
					BytesUp   int64     `json:"bytes_up"`
					BytesDown int64     `json:"bytes_down"`
				} `json:"decisions"`
			}
			b, err := apiclient.Raw(cl.gen.GetSandboxEgressWithResponse(c.Context(), got[0], &apiclient.GetSandboxEgressParams{Limit: &limit}))
			return a.renderAnswer(b, err, &out, func(w io.Writer) error {
				t := newTable(w, "TIME", "DESTINATION", "VERDICT", "UP", "DOWN", "REASON")
				for _, d := range out.Decisions {
					reason := ""
					if d.Reason != nil {
						reason = *d.Reason
					}
					t.row(localTime(d.Time), fmt.Sprintf("%s:%d", d.Host, d.Port), d.Verdict, d.BytesUp, d.BytesDown, reason)
				}
				return t.flush()
			})
		}),
	}
	c.Flags().IntVar(&limit, "limit", 50, "how many decisions (at most 200)")
	return c
}

// credentialSecretEnv carries a credential's secret to `sbx credentials
// add` when stdin is not used: never a flag, which ps and shell history
// would show.
const credentialSecretEnv = "SBX_CREDENTIAL_SECRET"

func newCredentialsCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "credentials",
		Short: "Secrets for upstream APIs that sandboxes use without seeing them",
		Long: `Credentials for upstream APIs. The egress gateway adds the credential's header
to requests a sandbox sends to its route (SBX_CREDENTIAL_<NAME>_URL inside a
sandbox created with --credential NAME); the secret never enters the sandbox
and no command or API answer shows it again.`,
		Args: args(nil),
	}
	var upstream, header string
	add := &cobra.Command{
		Use:   "add NAME",
		Short: "Store a credential (the secret from stdin, or $" + credentialSecretEnv + ")",
		Example: `  printf %s "$ANTHROPIC_API_KEY" | sbx credentials add anthropic --upstream https://api.anthropic.com --header x-api-key
  sbx create --credential anthropic   # then ANTHROPIC_BASE_URL=$SBX_CREDENTIAL_ANTHROPIC_URL inside`,
		Args: args([]string{"NAME"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			secret := os.Getenv(credentialSecretEnv)
			if secret == "" {
				line, err := bufio.NewReader(a.in).ReadString('\n')
				if err != nil && err != io.EOF {
					return fmt.Errorf("read the secret from stdin: %w", err)
				}
				secret = strings.TrimRight(line, "\r\n")
			}
			if secret == "" {
				return usageErrorf(c, "no secret: pipe it on stdin or set $%s", credentialSecretEnv)
			}
			body := apiclient.CreateCredential{Name: got[0], Upstream: upstream, Header: header, Secret: &secret}
			var out map[string]any
			b, err := apiclient.Raw(cl.gen.PutCredentialWithResponse(c.Context(), body))
			return a.renderAnswer(b, err, &out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "stored %s: %s gets %s\n", got[0], upstream, header)
				return err
			})
		}),
	}
	add.Flags().StringVar(&upstream, "upstream", "", "the upstream's base URL (https://...)")
	add.Flags().StringVar(&header, "header", "authorization", "the header the gateway adds")
	_ = add.MarkFlagRequired("upstream")
	ls := &cobra.Command{
		Use: "ls", Short: "List the account's credentials (never their secrets)", Args: args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			var out struct {
				Credentials []struct {
					Name       string     `json:"name"`
					Upstream   string     `json:"upstream"`
					Header     string     `json:"header"`
					LastUsedAt *time.Time `json:"last_used_at"`
				} `json:"credentials"`
			}
			b, err := apiclient.Raw(cl.gen.ListCredentialsWithResponse(c.Context()))
			return a.renderAnswer(b, err, &out, func(w io.Writer) error {
				t := newTable(w, "NAME", "UPSTREAM", "HEADER", "LAST USED")
				for _, cr := range out.Credentials {
					used := "-"
					if cr.LastUsedAt != nil {
						used = localTime(*cr.LastUsedAt)
					}
					t.row(cr.Name, cr.Upstream, cr.Header, used)
				}
				return t.flush()
			})
		}),
	}
	rm := &cobra.Command{
		Use: "rm NAME", Short: "Delete a credential; its routes stop working at once", Args: args([]string{"NAME"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			_, err := apiclient.Result(cl.gen.DeleteCredentialWithResponse(c.Context(), got[0]))
			return err
		}),
	}
	c.AddCommand(add, ls, rm)
	return c
}
