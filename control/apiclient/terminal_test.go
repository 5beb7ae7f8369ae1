package apiclient_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/sbxedge/sbx/control/apiclient"
)

// wantProblem checks that a terminal ended with the API's problem code.
func wantProblem(code string) func(error) string {
	return func(err error) string {
		var pe *apiclient.ProblemError
		if !errors.As(err, &pe) || pe.Code != code {
			return "want the " + code + " problem"
		}
		return ""
	}
}

// wantClosed checks that a terminal ended as closed, saying why.
func wantClosed(why string) func(error) string {
	return func(err error) string {
		if !errors.Is(err, apiclient.ErrTerminalClosed) || !strings.Contains(err.Error(), why) {
			return "want ErrTerminalClosed with " + why
		}
		return ""
	}
}

// TestTerminalEndings: how each way a terminal stream can end reaches
// the caller: the exit status, a refusal before the upgrade or a command
// that could not start as the API's problem, a close with a reason, a cut
// connection. The token travels in the header, never the URL.
func TestTerminalEndings(t *testing.T) {
	const token = "sbx_at_secret"
	for _, tc := range []struct {
		name   string
		serve  func(w http.ResponseWriter, r *http.Request) // after the checks below
		want   apiclient.TerminalExit
		output string
		check  func(error) string // "" when err is right
	}{
		{"exit status", func(w http.ResponseWriter, r *http.Request) {
			c := accept(t, w, r)
			_ = c.Write(r.Context(), websocket.MessageBinary, []byte("out\r\n"))
			_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"exit","exit_code":130,"signal":"INT"}`))
			_ = c.Close(websocket.StatusNormalClosure, "exited")
		}, apiclient.TerminalExit{ExitCode: 130}, "out\r\n", nil},
		{"refused before the upgrade", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"status":401,"code":"unauthorized","detail":"the token is not valid"}`))
		}, apiclient.TerminalExit{}, "", wantProblem("unauthorized")},
		{"could not start", func(w http.ResponseWriter, r *http.Request) {
			c := accept(t, w, r)
			_ = c.Write(r.Context(), websocket.MessageText, []byte(`{"type":"error","problem":{"status":409,"code":"sandbox_state","detail":"cannot reach a sandbox that is pending"}}`))
			_ = c.Close(websocket.StatusInternalError, "sandbox_state")
		}, apiclient.TerminalExit{}, "", wantProblem("sandbox_state")},
		{"closed with a reason", func(w http.ResponseWriter, r *http.Request) {
			c := accept(t, w, r)
			_ = c.Close(websocket.StatusGoingAway, "control is shutting down")
		}, apiclient.TerminalExit{}, "", wantClosed("control is shutting down")},
		{"cut", func(w http.ResponseWriter, r *http.Request) {
			accept(t, w, r).CloseNow()
		}, apiclient.TerminalExit{}, "", wantClosed("cut the connection")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Authorization") != "Bearer "+token || strings.Contains(r.URL.RawQuery, token) {
					t.Errorf("token sent as %q, query %q: want the header only", r.Header.Get("Authorization"), r.URL.RawQuery)
				}
				if got := r.URL.Query().Get("command"); got != "echo 'a b'" {
					t.Errorf("command %q, want %q", got, "echo 'a b'")
				}
				tc.serve(w, r)
			}))
			t.Cleanup(srv.Close)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cmd := "echo 'a b'"
			term, err := apiclient.DialTerminal(ctx, srv.Client(), srv.URL, token, "sbx-1", apiclient.ExecTerminalStreamParams{Command: &cmd})
			var out bytes.Buffer
			var res apiclient.TerminalExit
			if err == nil {
				defer term.Close()
				res, err = term.Output(ctx, &out)
			}
			if tc.check == nil {
				if err != nil || res.ExitCode != tc.want.ExitCode || out.String() != tc.output {
					t.Fatalf("got %+v, %q, %v; want exit %d and %q", res, out.String(), err, tc.want.ExitCode, tc.output)
				}
				return
			}
			if msg := tc.check(err); msg != "" {
				t.Fatalf("got %v: %s", err, msg)
			}
		})
	}
}

// accept upgrades r; it runs on the server's goroutine, where a failure
// is reported and the handler aborted (t.Fatal is for the test's own).
func accept(t *testing.T, w http.ResponseWriter, r *http.Request) *websocket.Conn {
	t.Helper()
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		t.Errorf("accept: %v", err)
		panic(http.ErrAbortHandler)
	}
	return c
}
