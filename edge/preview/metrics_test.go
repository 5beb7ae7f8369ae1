package preview_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sbxedge/sbx/internal/testkit/metrictest"
)

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, newTestApp())
	e.expose("metered", "sbx-a", "acct-a", false, false)
	for range 3 {
		e.get("metered", "/", "Authorization", "Bearer "+tokenA)
	}
	e.get("metered", "/")     // 401
	e.get("nosuchlabel", "/") // 404
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	hc := e.client()
	defer hc.CloseIdleConnections()
	c, _, err := websocket.Dial(ctx, "ws://"+e.host("metered")+"/ws", &websocket.DialOptions{
		HTTPClient: hc, HTTPHeader: http.Header{"Authorization": {"Bearer " + tokenA}},
	})
	if err != nil {
		t.Fatal(err)
	}
	gauge := func() float64 {
		m := metrictest.Series(t, e.reg, "sbx_preview_websockets_open")
		if m == nil {
			return -1
		}
		return m.GetGauge().GetValue()
	}
	if g := gauge(); g != 1 {
		t.Errorf("websockets_open with one open: %v, want 1", g)
	}
	c.Close(websocket.StatusNormalClosure, "")
	deadline := time.Now().Add(5 * time.Second)
	for gauge() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if g := gauge(); g != 0 {
		t.Errorf("websockets_open after close: %v, want 0", g)
	}
	if n, err := testutil.GatherAndCount(e.reg, "sbx_preview_upstream_latency_seconds"); err != nil || n != 1 {
		t.Errorf("upstream latency histogram: %d series, %v", n, err)
	}
	want := map[string]float64{"1xx": 1, "2xx": 3, "4xx": 2}
	mfs, _ := e.reg.Gather()
	for _, mf := range mfs {
		if mf.GetName() != "sbx_preview_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			class := m.GetLabel()[0].GetValue()
			if w, ok := want[class]; ok && m.GetCounter().GetValue() != w {
				t.Errorf("requests_total{class=%q} = %v, want %v", class, m.GetCounter().GetValue(), w)
			}
			delete(want, class)
		}
	}
	if len(want) != 0 {
		t.Errorf("requests_total lacks classes %v", want)
	}
}
