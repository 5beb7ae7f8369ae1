package apiclient_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sbxedge/sbx/control/apiclient"
)

// TestStreamsEndedByTheServer: when the server ends an event stream or a
// followed log with an "error" event (its token revoked), the caller gets
// that problem after what came before it, not a quiet end.
func TestStreamsEndedByTheServer(t *testing.T) {
	const revoked = `{"type":"https://sbx.dev/problems/token_revoked","status":401,"code":"token_revoked","detail":"revoked"}`
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if r.URL.Path == "/api/v1/sandboxes/sb1/events" {
			fmt.Fprint(w, "id: 1\nevent: state\ndata: {\"id\":1,\"type\":\"state\",\"state\":\"ready\"}\n\n: keep-alive\n\n")
		} else {
			fmt.Fprint(w, "event: line\ndata: {\"at\":\"2025-01-01T00:00:00Z\",\"text\":\"tick\"}\n\n")
		}
		fmt.Fprintf(w, "event: error\ndata: %s\n\n", revoked)
	}))
	t.Cleanup(srv.Close)
	c, err := apiclient.NewClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		follow func(seen func()) error
	}{
		{"event stream", func(seen func()) error {
			return apiclient.WatchEvents(context.Background(), c, "sb1", 0, func(e apiclient.Event) (bool, error) {
				if e.Id == 1 {
					seen()
				}
				return true, nil
			})
		}},
		{"log follow", func(seen func()) error {
			return apiclient.FollowServiceLogs(context.Background(), c, "sb1", "ticker", nil, func(l apiclient.LogLine) (bool, error) {
				if l.Text == "tick" {
					seen()
				}
				return true, nil
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			err := tc.follow(func() { n++ })
			if n != 1 {
				t.Errorf("saw the event before the error %d times, want 1", n)
			}
			if check := wantProblem("token_revoked")(err); check != "" {
				t.Errorf("got %v, %s", err, check)
			}
		})
	}
}
