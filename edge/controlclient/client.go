// Package controlclient is the edge's client for control's internal API
// (/internal/v1, see internal/edgeapi). It authenticates with the shared
// secret and turns problem documents into errors the edge's packages
// understand: the refusals declared in internal/edgeapi, which the
// broker's and the proxy's sentinels are.
//
// Adding an endpoint: a method that calls c.Do with the edgeapi path and
// types; its refusals arrive as edgeapi.Refusal values (see Authorize).
package controlclient

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

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

// Config configures a Client.
type Config struct {
	// BaseURL is control's internal listener, e.g. http://control:8081.
	BaseURL string
	// Secret is the shared bearer token.
	Secret string
	// Timeout bounds one call, including reading the body. Default 5s: an
	// SSH handshake waits on it, and a control plane slower than that is
	// better reported than waited for.
	Timeout time.Duration
	// HTTPClient is used when set (tests, custom transports); its own
	// Timeout is left alone.
	HTTPClient *http.Client
	// Now is the clock of the token cache (tests); default time.Now.
	Now func() time.Time
}

// Validate names the bad field. It has no side effects.
func (c *Config) Validate() error {
	u, err := url.Parse(c.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("controlclient config: BaseURL %q must be an http(s) URL", c.BaseURL)
	}
	if c.Secret == "" {
		return errors.New("controlclient config: Secret is empty")
	}
	if c.Timeout < 0 {
		return errors.New("controlclient config: Timeout must not be negative")
	}
	return nil
}

// Client calls control's internal API. It is safe for concurrent use.
//
// It caches TokenAccount's answers for a few seconds; its owner passes
// control's invalidations to Invalidate, before anything re-checks the
// connections they concern, so a revoked token is refused at once.
type Client struct {
	base    string
	secret  string
	timeout time.Duration
	hc      *http.Client
	tokens  *tokenCache
}

// New validates cfg and returns a Client.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	hc := cfg.HTTPClient
	if hc == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		// Every edge replica talks to a handful of control replicas all
		// day: keep enough idle connections that a burst of SSH handshakes
		// does not open a new TCP connection each.
		t.MaxIdleConnsPerHost = 64
		hc = &http.Client{Transport: t}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Client{base: strings.TrimRight(cfg.BaseURL, "/"), secret: cfg.Secret, timeout: cfg.Timeout, hc: hc}
	var err error
	if c.tokens, err = newTokenCache(c.askTokenAccount, tokenCacheTTL, tokenCacheSize, cfg.Now); err != nil {
		return nil, err
	}
	return c, nil
}

// Invalidate applies one of control's invalidations to what the client
// caches. Safe for concurrent use.
func (c *Client) Invalidate(_ context.Context, inv edgeapi.Invalidation) {
	c.tokens.invalidate(inv)
}

// Error is a problem document control answered with.
type Error struct {
	problem.Problem
}

func (e *Error) Error() string {
	return fmt.Sprintf("control internal API: %d %s: %s", e.Status, e.Code, e.Detail)
}

// Unwrap returns the refusal the problem's code names (see
// edgeapi.Refusal), so the edge's packages recognise control's refusals
// with errors.Is; nil for a fault.
func (e *Error) Unwrap() error {
	if e.Code == edgeapi.CodeSSHNotReady && e.SandboxID != "" {
		return &edgeapi.SSHNotReadyError{SandboxID: e.SandboxID}
	}
	if r := edgeapi.RefusalOf(e.Code); r != nil {
		return r
	}
	return nil
}

// Do sends in as JSON to path (one of the edgeapi.Path* constants) with
// method and decodes a 2xx JSON answer into out (nil: discard it). A
// problem answer is returned as *Error; anything else (transport, decode)
// wraps the cause.
func (c *Client) Do(ctx context.Context, method, path string, in, out any) error {
	return c.do(ctx, c.timeout, method, path, in, out)
}

// do is Do with its own bound, for the few calls that are meant to be
// held (wake).
func (c *Client) do(ctx context.Context, timeout time.Duration, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode %s request: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("build %s request: %w", path, err)
	}
	req.Header.Set("Authorization", "Bearer "+c.secret)
	req.Header.Set("Accept", "application/json, application/problem+json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("call control %s: %w", path, err)
	}
	defer resp.Body.Close()
	// Bounded: internal answers are small, and a confused peer must not
	// make the edge buffer without limit.
	lr := io.LimitReader(resp.Body, 1<<20)
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		e := &Error{}
		if err := json.NewDecoder(lr).Decode(&e.Problem); err != nil || e.Code == "" {
			e.Problem = problem.Problem{Status: resp.StatusCode, Code: "http_" + fmt.Sprint(resp.StatusCode), Detail: resp.Status}
		}
		e.Status = resp.StatusCode
		return e
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, lr)
		return nil
	}
	if err := json.NewDecoder(lr).Decode(out); err != nil {
		return fmt.Errorf("decode control %s answer: %w", path, err)
	}
	return nil
}

// Code returns the problem code of err if control answered with a problem,
// else "".
func Code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Health checks that control is reachable and accepts the secret.
func (c *Client) Health(ctx context.Context) error {
	return c.Do(ctx, http.MethodGet, edgeapi.PathHealth, nil, nil)
}
