package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestExecOutputJSON: sbx exec -o json prints the command's result as one
// JSON object (README: every command takes -o json for scripts) and still
// exits with the command's status; -t has no such result and is refused.
func TestExecOutputJSON(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != "POST" || !strings.HasSuffix(r.URL.Path, "/exec") {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: stdout\ndata: {\"data\":\"hi\\n\",\"encoding\":\"utf-8\"}\n\n"+
				"event: exit\ndata: {\"exit_code\":3,\"signal\":null,\"stdout_truncated\":false,\"stderr_truncated\":false,\"truncated\":false,\"timed_out\":false,\"duration_ms\":1}\n\n")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"stdout":"hi\n","stderr":"","stdout_encoding":"utf-8","stderr_encoding":"utf-8","exit_code":3,"signal":null,`+
			`"stdout_truncated":false,"stderr_truncated":false,"truncated":false,"timed_out":false,"duration_ms":1}`)
	}))
	t.Cleanup(srv.Close)
	cliEnv(t, srv.URL)
	for _, args := range [][]string{
		{"exec", fakeID, "-o", "json", "echo hi; exit 3"},
		{"-o", "json", "exec", fakeID, "--", "sh", "-c", "echo hi; exit 3"},
	} {
		code, out, errOut := runCLI(t, "", args...)
		var got struct {
			Stdout   string `json:"stdout"`
			ExitCode *int   `json:"exit_code"`
		}
		if err := json.Unmarshal([]byte(out), &got); err != nil || got.Stdout != "hi\n" || got.ExitCode == nil || *got.ExitCode != 3 {
			t.Errorf("sbx %s: stdout %q is not the exec result as JSON (%v); stderr %q", strings.Join(args, " "), out, err, errOut)
		}
		if code != 3 {
			t.Errorf("sbx %s: exit %d, want the command's 3", strings.Join(args, " "), code)
		}
	}
	if code, _, errOut := runCLI(t, "", "exec", "-tt", "-o", "json", fakeID, "--", "bash"); code != 2 || !strings.Contains(errOut, "-o json") {
		t.Errorf("sbx exec -tt -o json: exit %d, %q; want a usage error", code, errOut)
	}
}
