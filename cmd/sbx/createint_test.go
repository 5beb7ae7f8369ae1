package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCreateInterruptedNamesTheSandbox: Ctrl-C while sbx create waits for
// ready stops the waiting, not the sandbox; the error names the sandbox
// left running and how to see or remove it (also with -o id, where
// stdout stays empty), instead of a bare "interrupted".
func TestCreateInterruptedNamesTheSandbox(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/api/v1/sandboxes":
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"`+fakeID+`","status":"pending","profile":"p","platform":"linux","deadline_at":"2030-01-01T00:00:00Z"}`)
		case strings.HasSuffix(r.URL.Path, "/events"):
			w.Header().Set("Content-Type", "text/event-stream")
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			cancel() // the person presses Ctrl-C while it is pending
			<-r.Context().Done()
		default:
			http.Error(w, "unexpected", http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	var out, errb bytes.Buffer
	code := execute(ctx, []string{"create", "-o", "id"}, strings.NewReader(""), &out, &errb)
	if code != 130 || !strings.Contains(errb.String(), "sbx destroy "+fakeID) || !strings.Contains(errb.String(), "interrupted") {
		t.Errorf("Ctrl-C during create: exit %d, stderr %q; want exit 130 naming %s and how to destroy it", code, errb.String(), fakeID)
	}
	if out.Len() != 0 {
		t.Errorf("Ctrl-C during create -o id: stdout %q, want nothing (the sandbox is not ready)", out.String())
	}
}
