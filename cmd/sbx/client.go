package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/sbxedge/sbx/internal/apiclient"
)

// apiClient talks to the REST API and renders problem documents as errors.
type apiClient struct {
	base  string
	token string
	http  *http.Client
	// timeout bounds the wait for a response's headers. Bodies may stream
	// for longer (downloads, the event stream), so it is not a deadline
	// on the whole exchange.
	timeout time.Duration
	// gen is the generated client on the same API, token and transport:
	// every command uses it but files, whose uploads and downloads (with
	// progress) still go through the methods below.
	gen *apiclient.ClientWithResponses
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

func (c *apiClient) do(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Response, error) {
	return c.doWait(ctx, method, path, body, ctype, 0)
}

// doWait sends a request whose answer may take extra (an exec runs its
// command before answering) beyond the client's timeout.
func (c *apiClient) doWait(ctx context.Context, method, path string, body io.Reader, ctype string, extra time.Duration) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	return c.send(req, extra)
}

// send authenticates req, sends it, and turns an error status into an
// error (an *apiError for problem documents). It cancels the request if
// no response headers arrive within the timeout (plus extra).
func (c *apiClient) send(req *http.Request, extra time.Duration) (*http.Response, error) {
	req.Header.Set("Authorization", "Bearer "+c.token)
	ctx, cancel := context.WithCancelCause(req.Context())
	limit := c.timeout + extra
	timedOut := &apiTimeoutError{base: c.base, after: limit}
	var timer *time.Timer
	if c.timeout > 0 {
		timer = time.AfterFunc(limit, func() { cancel(timedOut) })
	}
	resp, err := c.http.Do(req.WithContext(ctx))
	if timer != nil {
		timer.Stop()
	}
	if err != nil {
		cancel(nil)
		if errors.Is(context.Cause(ctx), timedOut) {
			return nil, timedOut
		}
		return nil, err
	}
	// The body outlives this call; its context is released on Close.
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: func() { cancel(nil) }}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return nil, apiclient.Check(resp, b)
	}
	return resp, nil
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

// json sends v (if non-nil) and decodes the answer into out.
func (c *apiClient) json(ctx context.Context, method, path string, v, out any) error {
	return c.jsonWait(ctx, method, path, v, out, 0)
}

func (c *apiClient) jsonWait(ctx context.Context, method, path string, v, out any, extra time.Duration) error {
	var body io.Reader
	ctype := ""
	if v != nil {
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		body, ctype = bytes.NewReader(b), "application/json"
	}
	resp, err := c.doWait(ctx, method, path, body, ctype, extra)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, err = io.Copy(io.Discard, resp.Body)
		return err
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decode %s %s: %w", method, path, err)
	}
	return nil
}

func sandboxPath(id string, rest ...string) string {
	return "/api/v1/sandboxes/" + url.PathEscape(id) + strings.Join(rest, "")
}

type sandbox struct {
	ID          string     `json:"id"`
	Status      string     `json:"status"`
	Profile     string     `json:"profile"`
	Platform    string     `json:"platform"`
	CreatedAt   time.Time  `json:"created_at"`
	DeadlineAt  time.Time  `json:"deadline_at"`
	SuspendedAt *time.Time `json:"suspended_at,omitempty"`
	EndReason   *string    `json:"end_reason"`
	Workspace   *string    `json:"workspace"`
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

type profile struct {
	Name     string  `json:"name"`
	Platform string  `json:"platform"`
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memory_mb"`
	DiskGB   int     `json:"disk_gb"`
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
