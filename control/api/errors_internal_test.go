package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestClientGoneIsNoFailure: a request whose client went away mid-call
// (a wake it stopped waiting for) is answered 499 and logged below
// ERROR; the same cancellation while the client is still there is ours,
// an internal error logged as one.
func TestClientGoneIsNoFailure(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), loggerKey, log))
	r := httptest.NewRequest("POST", "/api/v1/sandboxes/sbx-x/exec", nil).WithContext(ctx)
	err := fmt.Errorf("wake sbx-x: %w", context.Canceled)

	if p := toProblem(r, err); p.Status != 500 || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("client still there: %d, log %q; want 500 and an ERROR line", p.Status, logs.String())
	}
	logs.Reset()
	cancel()
	if p := toProblem(r, err); p.Status != 499 || p.Code != "client_closed_request" || logs.Len() != 0 {
		t.Errorf("client gone: %d %s, log %q; want 499 and nothing at INFO or above", p.Status, p.Code, logs.String())
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatal("test error lost its cause")
	}
}
