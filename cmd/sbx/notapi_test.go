package main

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
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
