package apiclient

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"
)

// codeUnavailable is the API's answer while control cannot reach its
// database for a moment (a restart, a failover): the same call may well
// succeed a second later.
const codeUnavailable = "store_unavailable"

// Bounds of the retries of a request answered codeUnavailable: a few,
// each after the answer's Retry-After but never long, so a real outage
// still reaches the user in seconds, as the problem it is.
const (
	unavailableRetries = 3
	maxRetryWait       = 5 * time.Second
)

// retryUnavailable sends a request again when the API answers 503
// store_unavailable, if sending it twice cannot do something twice: a GET
// or HEAD, or a request with an Idempotency-Key (the API replays the
// first outcome) whose body can be sent again. Any other answer, and the
// last one, is returned as it came.
type retryUnavailable struct{ next HttpRequestDoer }

func (r retryUnavailable) Do(req *http.Request) (*http.Response, error) {
	for attempt := 0; ; attempt++ {
		resp, err := r.next.Do(req)
		if err != nil || resp.StatusCode != http.StatusServiceUnavailable || attempt == unavailableRetries || !repeatable(req) {
			return resp, err
		}
		body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		var p *ProblemError
		if !errors.As(Check(resp, body), &p) || p.Code != codeUnavailable {
			return resp, nil
		}
		wait := p.RetryAfter
		if resp.Header.Get("Retry-After") == "" {
			wait = time.Second
		}
		t := time.NewTimer(min(max(wait, 0), maxRetryWait))
		select {
		case <-req.Context().Done():
			t.Stop()
			return resp, nil
		case <-t.C:
		}
		if req.GetBody != nil {
			if req.Body, err = req.GetBody(); err != nil {
				return resp, nil
			}
		}
	}
}

func repeatable(req *http.Request) bool {
	switch {
	case req.Method == http.MethodGet || req.Method == http.MethodHead:
		return true
	case req.Header.Get("Idempotency-Key") != "":
		return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
	}
	return false
}
