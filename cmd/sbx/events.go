package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/api/v1/sandboxes/"+url.PathEscape(id)+"/events", nil)
	if err != nil {
		return true, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *lastID > 0 {
		req.Header.Set("Last-Event-ID", fmt.Sprint(*lastID))
	}
	resp, err := c.send(req)
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

// waitReady waits on the event stream until the sandbox is ready (or
// ends), then returns it as GET shows it.
func waitReady(ctx context.Context, c *apiClient, id string, limit time.Duration) (sandbox, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var last string
	err := followEvents(ctx, c, id, 0, func(ev event) bool {
		if ev.State != nil {
			last = *ev.State
		}
		return last != "pending" && last != ""
	})
	var sb sandbox
	if err == nil && ctx.Err() == nil {
		err = c.json(ctx, http.MethodGet, "/api/v1/sandboxes/"+url.PathEscape(id), nil, &sb)
	}
	switch {
	case ctx.Err() != nil:
		return sb, fmt.Errorf("sandbox %s still %s after %s", id, last, limit)
	case err != nil:
		return sb, err
	case sb.Status != "ready":
		return sb, fmt.Errorf("sandbox %s is %s", id, sb.Status)
	}
	return sb, nil
}

func runEvents(ctx context.Context, c *apiClient, fs *flag.FlagSet, args []string, finish func() error) error {
	follow := fs.Bool("follow", false, "keep streaming until the sandbox ends (Ctrl-C to stop)")
	if err := parse(fs, args, finish); err != nil {
		return err
	}
	id, err := arg(fs, 0, "ID")
	if err != nil {
		return err
	}
	if *follow {
		return followEvents(ctx, c, id, 0, func(ev event) bool {
			fmt.Fprintln(os.Stdout, string(ev.raw))
			return false
		})
	}
	var out struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := c.json(ctx, http.MethodGet, "/api/v1/sandboxes/"+url.PathEscape(id)+"/events", nil, &out); err != nil {
		return err
	}
	for _, e := range out.Events {
		fmt.Fprintln(os.Stdout, string(e))
	}
	return nil
}
