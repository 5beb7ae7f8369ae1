package metricsserver_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/sbxedge/sbx/internal/metricsserver"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestServesOnlyMetrics: GET /metrics answers the registry's series, any
// other path is 404, and Shutdown leaves no goroutine behind.
func TestServesOnlyMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "sbx_test_total", Help: "a test counter"})
	reg.MustRegister(c)
	c.Add(3)
	s, err := metricsserver.Start("127.0.0.1:0", reg, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr().String()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/metrics"); code != 200 || !strings.Contains(body, "sbx_test_total 3") {
		t.Fatalf("GET /metrics: %d %q, want 200 with sbx_test_total 3", code, body)
	}
	if code, _ := get("/"); code != 404 {
		t.Fatalf("GET /: %d, want 404", code)
	}
	http.DefaultClient.CloseIdleConnections()
	if err := s.Shutdown(context.Background()); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close after shutdown: %v", err)
	}
	if _, err := http.Get(base + "/metrics"); err == nil {
		t.Fatal("metrics still served after Shutdown")
	}
}

func TestStartRefusesABusyAddress(t *testing.T) {
	s, err := metricsserver.Start("127.0.0.1:0", prometheus.NewRegistry(), slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := metricsserver.Start(s.Addr().String(), prometheus.NewRegistry(), slog.New(slog.DiscardHandler), nil); err == nil {
		t.Fatal("a second server on the same address started")
	}
}
