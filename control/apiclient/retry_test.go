package apiclient_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sbxedge/sbx/control/apiclient"
)

// TestRetriesStoreUnavailable: a call the API answers 503
// store_unavailable (control lost its database for a moment) is sent
// again after the answer's Retry-After, when sending it twice is safe: a
// GET, or a create with an Idempotency-Key (the same body again). A
// create without a key, another 503 and a lasting outage come back as the
// problem they are.
func TestRetriesStoreUnavailable(t *testing.T) {
	type step struct{ code string } // "" answers 200
	unavailable := step{"store_unavailable"}
	tests := []struct {
		name     string
		answers  []step
		call     func(context.Context, *apiclient.ClientWithResponses) error
		wantSent int
		wantCode string // the problem's code, "" for success
	}{
		{"get, recovered", []step{unavailable, unavailable, {}}, getSandbox, 3, ""},
		{"get, outage lasts", []step{unavailable, unavailable, unavailable, unavailable, unavailable}, getSandbox, 4, "store_unavailable"},
		{"get, waking is not retried", []step{{"sandbox_waking"}, {}}, getSandbox, 1, "sandbox_waking"},
		{"create with key, recovered", []step{unavailable, {}}, createSandbox(ptr("k-1")), 2, ""},
		{"create without key", []step{unavailable, {}}, createSandbox(nil), 1, "store_unavailable"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu     sync.Mutex
				sent   int
				bodies []string
			)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				b, _ := io.ReadAll(r.Body)
				mu.Lock()
				a := tc.answers[min(sent, len(tc.answers)-1)]
				sent++
				bodies = append(bodies, string(b))
				mu.Unlock()
				if a.code == "" {
					w.Header().Set("Content-Type", "application/json")
					w.Write([]byte(`{"id":"sbx-1","status":"ready"}`))
					return
				}
				w.Header().Set("Content-Type", "application/problem+json")
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusServiceUnavailable)
				w.Write([]byte(`{"status":503,"code":"` + a.code + `","title":"t","detail":"d"}`))
			}))
			defer srv.Close()
			c, err := apiclient.New(srv.URL, "tok", nil)
			if err != nil {
				t.Fatal(err)
			}
			err = tc.call(context.Background(), c)
			var p *apiclient.ProblemError
			switch {
			case tc.wantCode == "" && err != nil:
				t.Fatalf("call: %v, want success", err)
			case tc.wantCode != "" && (!errors.As(err, &p) || p.Code != tc.wantCode):
				t.Fatalf("call: %v, want the problem %s", err, tc.wantCode)
			}
			mu.Lock()
			defer mu.Unlock()
			if sent != tc.wantSent {
				t.Fatalf("requests sent: %d, want %d", sent, tc.wantSent)
			}
			for i, b := range bodies {
				if b != bodies[0] {
					t.Fatalf("request %d carried %q, the first %q", i+1, b, bodies[0])
				}
			}
		})
	}
}

func getSandbox(ctx context.Context, c *apiclient.ClientWithResponses) error {
	_, err := apiclient.Result(c.GetSandboxWithResponse(ctx, "sbx-1"))
	return err
}

func createSandbox(key *string) func(context.Context, *apiclient.ClientWithResponses) error {
	return func(ctx context.Context, c *apiclient.ClientWithResponses) error {
		_, err := apiclient.Result(c.CreateSandboxWithResponse(ctx, &apiclient.CreateSandboxParams{IdempotencyKey: key},
			apiclient.CreateSandboxJSONRequestBody{}))
		return err
	}
}

func ptr[T any](v T) *T { return &v }
