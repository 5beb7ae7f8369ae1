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

	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/control/store"
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

// TestStoreUnavailableIs503: a call the database could not serve (its
// connection terminated, as seen with pg_terminate_backend under `sbx
// dev`) is answered 503 store_unavailable with Retry-After, a problem
// document saying to try again, not 500 internal.
func TestStoreUnavailableIs503(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	r := httptest.NewRequest("GET", "/api/v1/sandboxes", nil)
	r = r.WithContext(context.WithValue(r.Context(), loggerKey, log))
	cause := errors.New("FATAL: terminating connection due to administrator command (SQLSTATE 57P01)")
	err := fmt.Errorf("token by hash: %w", errors.Join(cause, store.ErrUnavailable))

	w := httptest.NewRecorder()
	writeError(w, r, err)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" ||
		w.Header().Get("Content-Type") != "application/problem+json" ||
		!strings.Contains(w.Body.String(), `"code":"store_unavailable"`) {
		t.Errorf("got %d Retry-After=%q %s %s; want 503 store_unavailable with Retry-After",
			w.Code, w.Header().Get("Retry-After"), w.Header().Get("Content-Type"), w.Body)
	}
	if strings.Contains(w.Body.String(), "SQLSTATE") {
		t.Errorf("body leaks the driver's error: %s", w.Body)
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("an outage of the database is logged as an internal error: %s", logs.String())
	}
}

// TestStoreFullIs507: a write the database's disk had no room for (sbx
// dev's data dir on a full filesystem) is 507 storage_full, saying so,
// not 500 internal.
func TestStoreFullIs507(t *testing.T) {
	r := httptest.NewRequest("POST", "/api/v1/sandboxes", nil)
	r = r.WithContext(context.WithValue(r.Context(), loggerKey, slog.New(slog.DiscardHandler)))
	err := fmt.Errorf("create sandbox: %w", store.Mark(errors.New("commit: database or disk is full (13)"), store.ErrFull))
	w := httptest.NewRecorder()
	writeError(w, r, err)
	if w.Code != 507 || !strings.Contains(w.Body.String(), `"code":"storage_full"`) || strings.Contains(w.Body.String(), "(13)") {
		t.Errorf("got %d %s; want 507 storage_full without the driver's words", w.Code, w.Body)
	}
}

// TestDiskFullIs507 (issue 27 L5): a file write the sandbox's disk had
// no room for is 507 storage_full, not a 500 logged as ERROR.
func TestDiskFullIs507(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	r := httptest.NewRequest("PUT", "/api/v1/sandboxes/sbx-x/files/big", nil)
	r = r.WithContext(context.WithValue(r.Context(), loggerKey, log))
	w := httptest.NewRecorder()
	writeFileError(w, r, fmt.Errorf("put /w/big: write: %w (%w)", podfiles.ErrNoSpace, errors.New("sftp: \"no space left on device\"")))
	if w.Code != 507 || !strings.Contains(w.Body.String(), `"storage_full"`) || !strings.Contains(w.Body.String(), "the sandbox's disk is full") {
		t.Fatalf("got %d %s, want 507 storage_full", w.Code, w.Body.String())
	}
	if strings.Contains(logs.String(), "level=ERROR") {
		t.Fatalf("logged %q, want no ERROR line", logs.String())
	}
}
