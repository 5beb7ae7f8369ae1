package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sbxedge/sbx/control/apiclient"
)

// apiClient is the generated API client with the API's base URL (for
// messages naming it).
type apiClient struct {
	base string
	gen  *apiclient.ClientWithResponses
}

// apiError is an RFC 9457 problem document from the API: the generated
// client's, so errors read alike whichever client made the call.
type apiError = apiclient.ProblemError

// apiTimeoutError is the API not answering within the client's timeout.
type apiTimeoutError struct {
	base  string
	after time.Duration
}

func (e *apiTimeoutError) Error() string {
	return fmt.Sprintf("the API at %s did not answer within %s (is it overloaded or stuck? --api-timeout waits longer)", e.base, e.after)
}

type cancelOnClose struct {
	io.ReadCloser
	cancel func()
}

func (b *cancelOnClose) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

type sandbox struct {
	ID          string            `json:"id"`
	Status      string            `json:"status"`
	Profile     string            `json:"profile"`
	Platform    string            `json:"platform"`
	CreatedAt   time.Time         `json:"created_at"`
	DeadlineAt  time.Time         `json:"deadline_at"`
	SuspendedAt *time.Time        `json:"suspended_at,omitempty"`
	EndReason   *string           `json:"end_reason"`
	Workspace   *string           `json:"workspace"`
	Name        *string           `json:"name"`
	Labels      map[string]string `json:"labels"`
	raw         json.RawMessage
}

func (s *sandbox) UnmarshalJSON(b []byte) error {
	type plain sandbox
	if err := json.Unmarshal(b, (*plain)(s)); err != nil {
		return err
	}
	s.raw = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON prints what the API said, every field of it.
func (s sandbox) MarshalJSON() ([]byte, error) {
	if s.raw != nil {
		return s.raw, nil
	}
	type plain sandbox
	return json.Marshal(plain(s))
}

func (c *apiClient) sandbox(ctx context.Context, id string) (sandbox, error) {
	var sb sandbox
	err := decodeRaw(&sb)(apiclient.Raw(c.gen.GetSandboxWithResponse(ctx, id)))
	return sb, err
}

// liveStatuses are the states of a sandbox that has not ended.
var liveStatuses = []apiclient.Status{apiclient.Pending, apiclient.Ready, apiclient.Suspending,
	apiclient.Suspended, apiclient.Restoring, apiclient.Terminating}

// sandboxes lists the account's sandboxes, newest first, every page of
// them (a page holds at most 200; a live sandbox older than the newest
// 200 must still show). With live, only those that have not ended, asked
// for state by state so that a long history of ended ones is not read.
func (c *apiClient) sandboxes(ctx context.Context, live bool, labels ...string) ([]sandbox, error) {
	filter := apiclient.ListSandboxesParams{}
	if len(labels) > 0 {
		filter.Label = &labels
	}
	if !live {
		return c.sandboxPages(ctx, filter)
	}
	var all []sandbox
	seen := map[string]bool{}
	for _, st := range liveStatuses {
		params := filter
		params.Status = &st
		list, err := c.sandboxPages(ctx, params)
		if err != nil {
			return nil, err
		}
		for _, sb := range list {
			// One that changed state between two requests is listed once.
			if !seen[sb.ID] {
				seen[sb.ID] = true
				all = append(all, sb)
			}
		}
	}
	slices.SortFunc(all, func(a, b sandbox) int {
		return cmp.Or(b.CreatedAt.Compare(a.CreatedAt), strings.Compare(b.ID, a.ID))
	})
	return all, nil
}

// sandboxPages follows next_cursor to the last page of GET /sandboxes
// with the filters params names.
func (c *apiClient) sandboxPages(ctx context.Context, params apiclient.ListSandboxesParams) ([]sandbox, error) {
	var all []sandbox
	limit := 200
	params.Limit = &limit
	for {
		var page struct {
			Sandboxes  []sandbox `json:"sandboxes"`
			NextCursor *string   `json:"next_cursor"`
		}
		if err := decodeRaw(&page)(apiclient.Raw(c.gen.ListSandboxesWithResponse(ctx, &params))); err != nil {
			return nil, err
		}
		all = append(all, page.Sandboxes...)
		if page.NextCursor == nil || *page.NextCursor == "" || len(page.Sandboxes) == 0 ||
			(params.Cursor != nil && *params.Cursor == *page.NextCursor) {
			return all, nil
		}
		params.Cursor = page.NextCursor
	}
}

// decodeRaw decodes an API answer (apiclient.Raw's) into out, keeping the
// CLI's own views of the API's documents.
func decodeRaw(out any) func(json.RawMessage, error) error {
	return func(raw json.RawMessage, err error) error {
		if err != nil {
			return err
		}
		if err := json.Unmarshal(raw, out); err != nil {
			return fmt.Errorf("decode the API's answer: %w", err)
		}
		return nil
	}
}

// renderAnswer decodes an API answer (apiclient.Raw's) into out, for
// text to print, and renders it: as the API sent it with -o json, else
// with text.
func (a *app) renderAnswer(b json.RawMessage, err error, out any, text func(w io.Writer) error) error {
	var raw map[string]any
	if err := decodeRaw(&raw)(b, err); err != nil {
		return err
	}
	if err := decodeRaw(out)(b, nil); err != nil {
		return err
	}
	return a.render(raw, text)
}

// withAPI is a command's RunE for commands whose arguments need no check
// before the API is called: it builds the client (or says there is no
// token) and runs run with it.
func (a *app) withAPI(run func(c *cobra.Command, cl *apiClient, got []string) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, got []string) error {
		cl, err := a.api()
		if err != nil {
			return err
		}
		return run(c, cl, got)
	}
}

type profile struct {
	Name     string  `json:"name"`
	Platform string  `json:"platform"`
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memory_mb"`
	DiskGB   int     `json:"disk_gb"`
	Default  bool    `json:"default,omitempty"`
}

func (c *apiClient) profiles(ctx context.Context) ([]profile, error) {
	var out struct {
		Profiles []profile `json:"profiles"`
	}
	err := decodeRaw(&out)(apiclient.Raw(c.gen.ListProfilesWithResponse(ctx)))
	return out.Profiles, err
}

// generated returns the generated API client with the CLI's API, token,
// transport and header timeout (plus extra, for calls the API may hold
// before answering, such as one on a sandbox that must wake first).
func (a *app) generated(extra time.Duration) (*apiclient.ClientWithResponses, error) {
	tok, err := a.token()
	if err != nil {
		return nil, err
	}
	rt := &headerTimeout{next: a.transport(), base: a.apiURL()}
	if a.timeout > 0 {
		rt.limit = a.timeout + extra
	}
	return apiclient.New(a.apiURL(), tok, &http.Client{Transport: rt})
}

// headerTimeout cancels a request whose response headers do not arrive
// within limit (0: no limit), as apiClient.send does: bodies (streams) may
// last longer.
type headerTimeout struct {
	next  http.RoundTripper
	base  string
	limit time.Duration
}

func (h *headerTimeout) RoundTrip(req *http.Request) (*http.Response, error) {
	if h.limit <= 0 {
		return h.next.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	timedOut := &apiTimeoutError{base: h.base, after: h.limit}
	timer := time.AfterFunc(h.limit, func() { cancel(timedOut) })
	resp, err := h.next.RoundTrip(req.WithContext(ctx))
	timer.Stop()
	if err != nil {
		cancel(nil)
		if errors.Is(context.Cause(ctx), timedOut) {
			return nil, timedOut
		}
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	return resp, nil
}
