package edge_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/servicetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "edge-test-secret-edge-test-secret-0123"

// fakeControl answers the internal API's health check, as control does.
func fakeControl(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != edgeapi.PathHealth || r.Header.Get("Authorization") != "Bearer "+secret {
			http.Error(w, `{"code":"unauthorized"}`, http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func config(t *testing.T, controlURL string) edge.Config {
	t.Helper()
	ca, _, err := sshca.Generate()
	if err != nil {
		t.Fatal(err)
	}
	c := edge.DefaultConfig()
	c.SSHAddr, c.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	c.ControlURL, c.InternalSecret = controlURL, secret
	c.HostKeyDir, c.CA, c.NoActivity = t.TempDir(), ca, true
	return c
}

// TestRunServesAndStops: the edge checks control, serves SSH and health,
// reports ready, and on cancel drains and leaves no goroutine behind.
func TestRunServesAndStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := config(t, fakeControl(t))
	e, done := servicetest.Start(t, "edge", func(ready func(*edge.Edge)) error { return edge.Run(ctx, cfg, ready) })
	resp, err := http.Get("http://" + e.HTTPAddr().String() + "/readyz")
	if err != nil || resp.StatusCode != http.StatusOK || !e.Ready() {
		t.Fatalf("readyz: %v %v, ready %v", resp, err, e.Ready())
	}
	resp.Body.Close()
	c, err := net.DialTimeout("tcp", e.SSHAddr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	banner := make([]byte, 7)
	if _, err := io.ReadFull(c, banner); err != nil || string(banner) != "SSH-2.0" {
		t.Fatalf("SSH banner %q %v", banner, err)
	}
	c.Close()
	if e.PreviewAddr() != nil {
		t.Error("previews serve without a preview address")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("run: %v", err)
	}
}

// TestOpenRefuses: a wrong secret fails at start, naming control; a
// config without an activity choice or a CA is refused before anything
// starts.
func TestOpenRefuses(t *testing.T) {
	c := config(t, fakeControl(t))
	c.InternalSecret = strings.Repeat("x", 40)
	if _, err := edge.Open(context.Background(), c); err == nil || !strings.Contains(err.Error(), "control's internal API") {
		t.Errorf("wrong secret: %v, want an error about control's internal API", err)
	}
	c = config(t, "http://127.0.0.1:1")
	c.NoActivity, c.CA = false, nil
	_, err := edge.Open(context.Background(), c)
	for _, want := range []string{"Redis", "CA"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config without activity or CA: %v, want it to name %s", err, want)
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		t.Error("validation waited for control")
	}
}
