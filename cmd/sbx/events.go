package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// event is one lifecycle event as the API renders it.
// Only what the CLI acts on is decoded; raw keeps the rest for printing.
type event struct {
	ID      int64   `json:"id"`
	Type    string  `json:"type"`
	State   *string `json:"state"`
	Reason  *string `json:"reason"`
	Message *string `json:"message"`
	raw     json.RawMessage
}

// followEvents reads the sandbox's event stream from after the event
// lastID, calling fn for each event until fn returns true or the server
// ends the stream (the sandbox reached a final state). A dropped
// connection is resumed with Last-Event-ID, so no event is skipped.
func followEvents(ctx context.Context, c *apiClient, id string, lastID int64, fn func(event) bool) error {
	for attempt := 0; ; attempt++ {
		done, err := c.streamOnce(ctx, id, &lastID, fn)
		if done || ctx.Err() != nil {
			return err
		}
		var apiErr *apiError
		if errors.As(err, &apiErr) || attempt >= 5 {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
}

// streamOnce reads one connection's worth of events, resuming after
// *lastID. done is true when fn asked to stop or the server ended the
// stream; a cut connection is an error with done false.
func (c *apiClient) streamOnce(ctx context.Context, id string, lastID *int64, fn func(event) bool) (done bool, err error) {
	stopped := false
	err = apiclient.WatchEventsRaw(ctx, c.gen, id, int(*lastID), func(e apiclient.Event, raw json.RawMessage) (bool, error) {
		ev := event{ID: int64(e.Id), Type: e.Type, Reason: e.Reason, Message: e.Message, raw: raw}
		if e.State != nil {
			st := string(*e.State)
			ev.State = &st
		}
		*lastID = ev.ID
		stopped = fn(ev)
		return !stopped, nil
	})
	if err != nil {
		return stopped, err
	}
	return true, nil
}

func newEventsCmd(a *app) *cobra.Command {
	var follow bool
	c := &cobra.Command{
		Use:   "events ID",
		Short: "A sandbox's lifecycle events, one JSON object a line",
		Long: `A sandbox's lifecycle events, one JSON object a line. With --follow, live
events as they happen, until the sandbox ends (terminated or failed) or Ctrl-C.`,
		Example:           "  sbx events $ID\n  sbx events --follow $ID",
		Args:              args([]string{"ID"}),
		ValidArgsFunction: a.completeSandboxes,
		RunE: a.withAPI(func(c *cobra.Command, cl *apiClient, got []string) error {
			id := got[0]
			if follow {
				return followEvents(c.Context(), cl, id, 0, func(ev event) bool {
					fmt.Fprintln(a.out, string(ev.raw))
					return false
				})
			}
			var out struct {
				Events []json.RawMessage `json:"events"`
			}
			if err := decodeRaw(&out)(apiclient.Raw(cl.gen.SandboxEventsWithResponse(c.Context(), id, nil))); err != nil {
				return err
			}
			for _, e := range out.Events {
				fmt.Fprintln(a.out, string(e))
			}
			return nil
		}),
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "stream live events until the sandbox ends")
	return c
}
