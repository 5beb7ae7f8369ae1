package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

func newWebhooksCmd(a *app) *cobra.Command {
	c := &cobra.Command{
		Use:     "webhooks",
		Aliases: []string{"webhook"},
		Short:   "Register, list and remove webhooks, and read their delivery logs",
		Long: `A webhook receives every lifecycle transition of your account's sandboxes
(sandbox.pending, sandbox.ready, ... sandbox.terminated) as a signed JSON POST,
retried with backoff for up to 24 hours. Without a subcommand: list them.`,
		Example: `  sbx webhooks add https://hooks.example.com/sbx --events 'sandbox.*'
  sbx webhooks ls
  sbx webhooks deliveries wh_...
  sbx webhooks redeliver wh_... whd_...
  sbx webhooks rm wh_...`,
		Args: args(nil),
		RunE: a.withAPI(listWebhooks(a)),
	}
	ls := &cobra.Command{Use: "ls", Aliases: []string{"list"}, Short: "List the account's webhooks", Args: args(nil), RunE: a.withAPI(listWebhooks(a))}
	c.AddCommand(newWebhookAddCmd(a), ls, newWebhookRmCmd(a), newWebhookDeliveriesCmd(a), newWebhookRedeliverCmd(a))
	return c
}

func listWebhooks(a *app) func(c *cobra.Command, cl *apiClient, got []string) error {
	return func(c *cobra.Command, cl *apiClient, _ []string) error {
		var out apiclient.WebhookList
		if err := decodeRaw(&out)(apiclient.Raw(cl.gen.ListWebhooksWithResponse(c.Context()))); err != nil {
			return err
		}
		return a.render(out, func(w io.Writer) error {
			t := newTable(w, "ID", "EVENTS", "URL", "CREATED")
			for _, h := range out.Webhooks {
				t.row(h.Id, strings.Join(h.Events, ","), h.Url, localTime(h.CreatedAt))
			}
			return t.flush()
		})
	}
}

func newWebhookAddCmd(a *app) *cobra.Command {
	var events []string
	c := &cobra.Command{
		Use:   "add URL",
		Short: "Register a webhook; prints its signing secret, shown this once",
		Long: `Register URL to receive the events --events selects (sandbox.* by default;
or sandbox.ready, sandbox.terminated, ...; repeatable or comma-separated).
Prints the webhook's ID and its signing secret (whsec_...), which is not shown
again: keep it where your receiver reads it, and verify each delivery with it
as the README's "Webhooks" section shows.`,
		Example: `  sbx webhooks add https://hooks.example.com/sbx
  sbx webhooks add https://hooks.example.com/sbx --events sandbox.ready,sandbox.terminated`,
		Args: args([]string{"URL"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var out apiclient.Webhook
			body := apiclient.WebhookRequest{Url: got[0], Events: events}
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.CreateWebhookWithResponse(c.Context(), body))); err != nil {
				return err
			}
			return a.render(out, func(w io.Writer) error {
				secret := ""
				if out.Secret != nil {
					secret = *out.Secret
				}
				_, err := fmt.Fprintf(w, "id:     %s\nsecret: %s\n(the secret is not shown again)\n", out.Id, secret)
				return err
			})
		}),
	}
	c.Flags().StringSliceVar(&events, "events", []string{"sandbox.*"}, "event types to receive: sandbox.*, *, or sandbox.<state>")
	return c
}

func newWebhookRmCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "rm WEBHOOK_ID",
		Aliases: []string{"delete"},
		Short:   "Remove a webhook and its delivery log",
		Example: "  sbx webhooks rm wh_...",
		Args:    args([]string{"WEBHOOK_ID"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			_, err := apiclient.Result(cl.gen.DeleteWebhookWithResponse(c.Context(), got[0]))
			return err
		}),
	}
}

func newWebhookDeliveriesCmd(a *app) *cobra.Command {
	var limit int
	c := &cobra.Command{
		Use:     "deliveries WEBHOOK_ID",
		Short:   "A webhook's delivery log, newest first",
		Example: "  sbx webhooks deliveries wh_...",
		Args:    args([]string{"WEBHOOK_ID"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var out apiclient.WebhookDeliveryList
			params := &apiclient.ListWebhookDeliveriesParams{Limit: &limit}
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.ListWebhookDeliveriesWithResponse(c.Context(), got[0], params))); err != nil {
				return err
			}
			return a.render(out, func(w io.Writer) error {
				t := newTable(w, "ID", "EVENT", "SANDBOX", "STATUS", "ATTEMPTS", "CODE", "MS", "NEXT RETRY", "ERROR")
				for _, d := range out.Deliveries {
					t.row(d.Id, d.EventType, d.SandboxId, d.Status, strconv.Itoa(d.Attempts), optInt(d.LastStatusCode),
						strconv.Itoa(d.LastDurationMs), optTime(d.NextRetryAt), d.LastError)
				}
				return t.flush()
			})
		}),
	}
	c.Flags().IntVar(&limit, "limit", 50, "most deliveries to show (1 to 200)")
	return c
}

func newWebhookRedeliverCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "redeliver WEBHOOK_ID DELIVERY_ID",
		Short:   "Send a delivery again (same event, signed afresh)",
		Example: "  sbx webhooks redeliver wh_... whd_...",
		Args:    args([]string{"WEBHOOK_ID", "DELIVERY_ID"}),
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			var out apiclient.WebhookDelivery
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.RedeliverWebhookWithResponse(c.Context(), got[0], got[1]))); err != nil {
				return err
			}
			return a.render(out, func(w io.Writer) error {
				_, err := fmt.Fprintf(w, "%s queued\n", out.Id)
				return err
			})
		}),
	}
}
