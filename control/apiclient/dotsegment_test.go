package apiclient_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/sbxedge/sbx/control/apiclient"
)

// TestDotSegmentsRefused: an argument of "." or ".." never sends a
// request to another resource than the one its operation names. The
// generated code resolves paths as URL references, so without the check
// DeleteService(id, "..") went out as DELETE /api/v1/sandboxes/{id}/.
func TestDotSegmentsRefused(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Method+" "+r.URL.Path)
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	c, err := apiclient.New(srv.URL, "tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refused := []struct {
		name string
		call func() (*http.Response, error)
	}{
		{"service ..", func() (*http.Response, error) { return c.DeleteService(ctx, "sbx-1", "..") }},
		{"service .", func() (*http.Response, error) { return c.DeleteService(ctx, "sbx-1", ".") }},
		{"file ..", func() (*http.Response, error) {
			return c.DeleteSandboxFile(ctx, "sbx-1", "..", &apiclient.DeleteSandboxFileParams{})
		}},
		{"sandbox .", func() (*http.Response, error) { return c.DeleteSandbox(ctx, ".", nil) }},
		{"sandbox ..", func() (*http.Response, error) { return c.DeleteSandbox(ctx, "..", nil) }},
		{"empty sandbox id", func() (*http.Response, error) { return c.DeleteService(ctx, "", "web") }},
	}
	for _, tt := range refused {
		resp, err := tt.call()
		if resp != nil {
			resp.Body.Close()
		}
		if !errors.Is(err, apiclient.ErrDotSegment) {
			t.Errorf("%s: err %v, want ErrDotSegment", tt.name, err)
		}
	}
	mu.Lock()
	if len(seen) != 0 {
		t.Errorf("refused calls reached the server: %q", seen)
	}
	mu.Unlock()

	// The workspace's root is the files operation with an empty path,
	// and "." lands there too; names holding dots are names.
	allowed := map[string]func() (*http.Response, error){
		"GET /api/v1/sandboxes/sbx-1/files/":          func() (*http.Response, error) { return c.ReadSandboxFile(ctx, "sbx-1", "", nil) },
		"GET /api/v1/sandboxes/sbx-1/files/.env":      func() (*http.Response, error) { return c.ReadSandboxFile(ctx, "sbx-1", ".env", nil) },
		"DELETE /api/v1/sandboxes/sbx-1/services/a.b": func() (*http.Response, error) { return c.DeleteService(ctx, "sbx-1", "a.b") },
		"DELETE /api/v1/sandboxes/sbx-1":              func() (*http.Response, error) { return c.DeleteSandbox(ctx, "sbx-1", nil) },
	}
	for want, call := range allowed {
		mu.Lock()
		seen = nil
		mu.Unlock()
		resp, err := call()
		if err != nil {
			t.Errorf("%s: %v", want, err)
			continue
		}
		resp.Body.Close()
		mu.Lock()
		if len(seen) != 1 || seen[0] != want {
			t.Errorf("server saw %q, want %q", seen, want)
		}
		mu.Unlock()
	}
}
