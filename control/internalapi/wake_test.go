package internalapi

import (
	"context"
	"fmt"
	"testing"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// fakeWaker answers per sandbox ID.
type fakeWaker map[string]error

func (f fakeWaker) Wake(_ context.Context, id string) error { return f[id] }

func TestWake(t *testing.T) {
	ts := newTestServer(t, Deps{Waker: fakeWaker{
		"sbx-gone":    fmt.Errorf("wake sbx-gone: %w: %w", lifecycle.ErrCannotWake, &lifecycle.StateError{State: "terminated", Action: "wake"}),
		"sbx-nobody":  lifecycle.ErrNotFound,
		"sbx-limited": fmt.Errorf("begin restore: %w: 10 of 10", lifecycle.ErrLimit),
		"sbx-slow":    fmt.Errorf("wake sbx-slow: %w", context.DeadlineExceeded),
		"sbx-parked":  fmt.Errorf("wake sbx-parked: %w", lifecycle.ErrWakeDisabled),
	}})
	auth := "Bearer " + testSecret
	resp, body := do(t, ts, "POST", edgeapi.PathWake, auth, `{"sandbox_id":"sbx-ok"}`)
	if resp.StatusCode != 200 || string(body) != "{\"ready\":true}\n" {
		t.Fatalf("wake ok: %d %s", resp.StatusCode, body)
	}
	for _, c := range []struct {
		id     string
		status int
		code   string
	}{
		{"sbx-gone", 409, edgeapi.CodeWakeEnded},
		{"sbx-nobody", 404, edgeapi.CodeWakeUnknownSandbox},
		{"sbx-limited", 429, edgeapi.CodeWakeLimit},
		{"sbx-slow", 503, edgeapi.CodeWakeTimeout},
		{"sbx-parked", 409, edgeapi.CodeWakeLimit},
		{"", 400, edgeapi.CodeInvalidRequest},
	} {
		t.Run(c.id, func(t *testing.T) {
			resp, body := do(t, ts, "POST", edgeapi.PathWake, auth, `{"sandbox_id":"`+c.id+`"}`)
			wantProblem(t, resp, body, c.status, c.code)
		})
	}
	resp, body = do(t, ts, "POST", edgeapi.PathWake, "", `{"sandbox_id":"sbx-ok"}`)
	wantProblem(t, resp, body, 401, edgeapi.CodeUnauthorized)
}
