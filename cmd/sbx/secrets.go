package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// maxSecretInput bounds what `sbx secrets set` reads (the API's limit).
const maxSecretInput = 64 << 10

type secretRow struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func newSecretsCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:   "secrets",
		Short: "Store, list and delete the account's secrets",
		Long: `Account secrets are written once and never shown again: the API keeps them
sealed and hands a value only to the sandboxes created with it
(sbx create --secret NAME or --secret-file NAME).`,
		Example: "  gh auth token | sbx secrets set GH_TOKEN\n  sbx secrets list\n  sbx secrets rm GH_TOKEN",
	}
	set := &cobra.Command{
		Use:   "set NAME",
		Short: "Store (or replace) a secret, its value read from stdin",
		Long: `Store a secret, its value read from stdin (never a flag or an argument: those
show in ps and in shell history). A trailing newline is dropped.`,
		Args: args([]string{"NAME"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			if a.in == nil {
				return usageErrorf(c, "the value is read from stdin")
			}
			b, err := io.ReadAll(io.LimitReader(a.in, maxSecretInput+2))
			if err != nil {
				return fmt.Errorf("read stdin: %w", err)
			}
			v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if len(v) > maxSecretInput {
				return fmt.Errorf("the value is over %s", sizeString(maxSecretInput))
			}
			var row secretRow
			if err := decodeRaw(&row)(apiclient.Raw(cl.gen.PutSecretWithResponse(c.Context(), apiclient.SecretRequest{Name: got[0], Value: v}))); err != nil {
				return err
			}
			return a.render(row, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "secret %s stored\n", row.Name)
				return err
			})
		}),
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List the secrets (names and times; values are never shown)",
		Args:  args(nil),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, _ []string) error {
			var out struct {
				Secrets []secretRow `json:"secrets"`
			}
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.ListSecretsWithResponse(c.Context()))); err != nil {
				return err
			}
			return a.render(out.Secrets, func(w io.Writer) error {
				t := newTable(w, "NAME", "CREATED", "UPDATED")
				for _, s := range out.Secrets {
					t.row(s.Name, localTime(s.CreatedAt), localTime(s.UpdatedAt))
				}
				return t.flush()
			})
		}),
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "Delete a secret",
		Args:  args([]string{"NAME"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			_, err := apiclient.Raw(cl.gen.DeleteSecretWithResponse(c.Context(), got[0]))
			return err
		}),
	}
	c.AddCommand(set, list, rm)
	return c
}
