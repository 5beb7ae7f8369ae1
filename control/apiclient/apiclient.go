// Package apiclient is the Go client of the sandbox REST API.
//
// client.gen.go is generated from control/api/openapi.json by oapi-codegen
// (`make generate`; TestGeneratedClientIsCurrent fails when it is stale).
// This file adds what a generator cannot know: bearer authentication,
// problem documents as Go errors, and the two server-sent event streams
// (streamed exec and lifecycle events).
package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// New returns a client of the API at base (scheme://host[:port]) that sends
// its requests through doer (nil: a default http.Client) and authenticates
// them with token when it is not empty. A request that can safely be sent
// twice is sent again, a few times and briefly, while the API answers 503
// store_unavailable (see retryUnavailable).
func New(base, token string, doer HttpRequestDoer) (*ClientWithResponses, error) {
	if doer == nil {
		doer = &http.Client{}
	}
	opts := []ClientOption{WithRequestEditorFn(refuseDotSegments), WithHTTPClient(retryUnavailable{doer})}
	if token != "" {
		opts = append(opts, WithRequestEditorFn(Bearer(token)))
	}
	return NewClientWithResponses(base, opts...)
}

// ErrDotSegment is a request refused because an argument of "." or ".."
// would have sent it to another resource than the one named.
var ErrDotSegment = errors.New(`an argument of "." or ".." names no resource here (it would address another one)`)

// refuseDotSegments refuses requests that a "." or ".." argument moved.
// The generated code resolves each operation's path as a URL reference,
// which removes dot segments: DELETE .../services/{name} with the name
// ".." would go out as DELETE /api/v1/sandboxes/{id}/, the sandbox
// itself. Such a rewrite always leaves a path ending in "/" or holding an
// empty segment, which no operation of the API has, but for the files
// operations' empty path: the workspace's root (where "." lands too).
func refuseDotSegments(_ context.Context, req *http.Request) error {
	p := req.URL.Path
	if strings.Contains(p, "//") || strings.HasSuffix(p, "/") && !strings.HasSuffix(p, "/files/") {
		return fmt.Errorf("%s %s: %w", req.Method, p, ErrDotSegment)
	}
	return nil
}

// Bearer authenticates a request with an account agent token.
func Bearer(token string) RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+token)
		return nil
	}
}

// ProblemError is an RFC 9457 problem document the API answered with.
type ProblemError struct {
	Type   string `json:"type"`
	Status int    `json:"status"`
	Code   string `json:"code"`
	Title  string `json:"title"`
	Detail string `json:"detail"`
	// RetryAfter is the Retry-After header of a 503 (a sandbox waking).
	RetryAfter time.Duration `json:"-"`
}

func (e *ProblemError) Error() string {
	return fmt.Sprintf("%d %s: %s", e.Status, e.Code, e.Detail)
}

// NotProblemError is an error status without a problem document: the
// server is most likely not the sbx API (a wrong base URL), or a proxy in
// front of it answered.
type NotProblemError struct {
	Method, Path, Status string
	// Body is the start of the answer on one line, for a hint of who
	// answered; an HTML page of any size stays one short line.
	Body string
}

func (e *NotProblemError) Error() string {
	msg := fmt.Sprintf("%s %s: %s without a problem document", e.Method, e.Path, e.Status)
	if e.Body != "" {
		msg += ": " + e.Body
	}
	return msg
}

// bodyExcerpt is body's first 120 characters with runs of white space
// made one space.
func bodyExcerpt(body []byte) string {
	const max = 120
	s := strings.Join(strings.Fields(string(body[:min(len(body), 4*max)])), " ")
	if r := []rune(s); len(r) > max {
		s = string(r[:max]) + "..."
	}
	return s
}

// Check returns nil for a response below 400, a *ProblemError for a
// problem document, and a plain error naming the status otherwise. body
// is the response body already read (the generated *Response types hold
// it as Body).
func Check(resp *http.Response, body []byte) error {
	if resp.StatusCode < 400 {
		return nil
	}
	p := &ProblemError{}
	if json.Unmarshal(body, p) != nil || p.Code == "" {
		return &NotProblemError{Method: resp.Request.Method, Path: resp.Request.URL.Path, Status: resp.Status, Body: bodyExcerpt(body)}
	}
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil {
		p.RetryAfter = time.Duration(s) * time.Second
	}
	return p
}

// Result returns r with its error: the transport's, or the problem the
// API answered with, so a call reads
//
//	sb, err := apiclient.Result(c.GetSandboxWithResponse(ctx, id))
//
// r is one of the generated *…Response types, which all hold the raw
// response as HTTPResponse and its body as Body.
func Result[R any](r *R, err error) (*R, error) {
	if err != nil {
		return r, err
	}
	resp, body := raw(r)
	if resp == nil {
		return r, fmt.Errorf("apiclient: %T holds no HTTP response", r)
	}
	return r, Check(resp, body)
}

// Raw is Result returning the response body as it came, for callers that
// pass the API's JSON on (the MCP tools).
func Raw[R any](r *R, err error) (json.RawMessage, error) {
	if _, err := Result(r, err); err != nil {
		return nil, err
	}
	_, body := raw(r)
	return json.RawMessage(body), nil
}

func raw(r any) (*http.Response, []byte) {
	v := reflect.ValueOf(r).Elem()
	resp, _ := v.FieldByName("HTTPResponse").Interface().(*http.Response)
	body, _ := v.FieldByName("Body").Interface().([]byte)
	return resp, body
}
