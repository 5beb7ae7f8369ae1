package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// event is one lifecycle event as the API renders it.
// Only what the CLI acts on is decoded; raw keeps the rest for printing.
type event struct {
	ID    int64   `json:"id"`
	State *string `json:"state"`
	raw   json.RawMessage
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

// streamOnce reads one connection's worth of events. done is true when fn
// asked to stop or the server ended the stream.
func (c *apiClient) streamOnce(ctx context.Context, id string, lastID *int64, fn func(event) bool) (done bool, err error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+sandboxPath(id, "/events"), nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *lastID > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(*lastID))
	}
	resp, err := c.send(req, 0)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue // id:, event:, comments and blank lines: the data line has it all
		}
		var ev event
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			return true, fmt.Errorf("event stream: %w", err)
		}
		ev.raw = json.RawMessage(data)
		*lastID = ev.ID
		if fn(ev) {
			return true, nil
		}
	}
	if err := sc.Err(); err != nil {
		return false, fmt.Errorf("event stream: %w", err)
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
		RunE: func(c *cobra.Command, got []string) error {
			cl, err := a.api()
			if err != nil {
				return err
			}
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
			if err := cl.json(c.Context(), http.MethodGet, sandboxPath(id, "/events"), nil, &out); err != nil {
				return err
			}
			for _, e := range out.Events {
				fmt.Fprintln(a.out, string(e))
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "stream live events until the sandbox ends")
	return c
}
