package control_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/standalone"
)

// TestStalledBodiesAreCut (issue 27, M1): on control's REST API, internal
// API and metrics listeners, a request whose declared body never arrives
// ends within the body timeout, before any token or secret is checked.
func TestStalledBodiesAreCut(t *testing.T) {
	svc, err := control.Open(context.Background(), standalone.Fill(control.Config{
		DataDir: t.TempDir(), APIAddr: "127.0.0.1:0", MetricsAddr: "127.0.0.1:0",
		InternalAddr: "127.0.0.1:0", InternalSecret: "test-secret-test-secret-test-secret",
		BodyTimeout: 500 * time.Millisecond,
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Shutdown(context.Background()) })
	if err := svc.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, addr, path string }{
		{"API, no token", strings.TrimPrefix(svc.URL(), "http://"), "/api/v1/sandboxes"},
		{"API, introspection reading the body", strings.TrimPrefix(svc.URL(), "http://"), "/api/v1/grants/introspect"},
		{"internal API, no secret", strings.TrimPrefix(svc.InternalURL(), "http://"), "/internal/v1/ssh/authorize"},
		{"metrics", svc.MetricsAddr().String(), "/metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := net.Dial("tcp", tc.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n", tc.path)
			// Far past the timeout: the safety net, not the measure.
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.Copy(io.Discard, c); err != nil && !strings.Contains(err.Error(), "connection reset") {
				t.Fatalf("the connection was still open 20 s after its head, with a 500 ms body timeout: %v", err)
			}
		})
	}
}
