package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/problem"
)

// TestNotTheAPI: --api naming some other web server (or a failing proxy)
// is told as such in one short line with exit 3, not as a request that
// failed with the server's whole page pasted in.
func TestNotTheAPI(t *testing.T) {
	page := "<!DOCTYPE html>\n<html>\n<body>\n" + strings.Repeat("<p>nothing here</p>\n", 200) + "</body></html>"
	for _, tc := range []struct {
		status int
		body   string
	}{
		{http.StatusNotFound, page},
		{http.StatusBadGateway, ""},
		{http.StatusUnauthorized, `{"error":"nope"}`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(tc.body))
		}))
		cliEnv(t, srv.URL)
		code, _, stderr := runCLI(t, "", "get", fakeID)
		srv.Close()
		if code != 3 || !strings.Contains(stderr, "is not the sbx API") || !strings.Contains(stderr, "--api") {
			t.Errorf("%d from a non-API server: exit %d, %q; want exit 3 saying it is not the sbx API", tc.status, code, stderr)
		}
		if strings.Count(stderr, "\n") != 1 || len(stderr) > 400 {
			t.Errorf("%d from a non-API server: want one short line, got %d bytes:\n%s", tc.status, len(stderr), stderr)
		}
	}
}

// TestPreviewPortIsNotTheAPI: --api naming the preview port (sbx dev's
// 8081) got the proxy's problem document, a well-formed 404, and said
// "no preview is exposed at this address" with exit 5; it is a wrong
// --api like any other, exit 3.
func TestPreviewPortIsNotTheAPI(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// What edge/preview's errUnknownHost answers, through the same
		// encoder.
		problem.Write(w, r, problem.New(http.StatusNotFound, "preview_not_found", "no preview is exposed at this address"))
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	for _, args := range [][]string{{"get", fakeID}, {"list"}} {
		code, _, stderr := runCLI(t, "", args...)
		if code != 3 || !strings.Contains(stderr, "is not the sbx API") || !strings.Contains(stderr, "preview proxy") ||
			!strings.Contains(stderr, "--api") || strings.Contains(stderr, "no preview is exposed") {
			t.Errorf("sbx %s against the preview port: exit %d, %q; want exit 3 saying it is the preview proxy, not the API",
				strings.Join(args, " "), code, stderr)
		}
	}
}
