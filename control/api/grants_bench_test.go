package api_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
)

// BenchmarkWaitReady compares an agent waiting for ready on the event
// stream with one polling GET every 10 ms, in the same run on the dev
// stack: time from POST to seeing ready, and requests spent per wait.
func BenchmarkWaitReady(b *testing.B) {
	e := newBenchEnv(b, "sqlite")
	create := func() string {
		code, _, body := e.do("dev", "POST", "/api/v1/sandboxes", strings.NewReader(`{"profile":"tuist-linux-small"}`))
		if code != 201 {
			b.Fatalf("create: %d %s", code, body)
		}
		var sb struct{ ID string }
		_ = json.Unmarshal(body, &sb)
		return sb.ID
	}
	stream := func() time.Duration {
		start := time.Now()
		id := create()
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		evs := e.openStream(ctx, "dev", id, "")
		for ev := range evs {
			if ev.Data.State == "ready" {
				break
			}
		}
		d := time.Since(start)
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
		return d
	}
	polls := 0
	poll := func() time.Duration {
		start := time.Now()
		id := create()
		for {
			polls++
			_, _, body := e.do("dev", "GET", "/api/v1/sandboxes/"+id, nil)
			var sb struct{ Status string }
			_ = json.Unmarshal(body, &sb)
			if sb.Status == "ready" {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		d := time.Since(start)
		e.do("dev", "DELETE", "/api/v1/sandboxes/"+id, nil)
		return d
	}
	var s, p time.Duration
	for b.Loop() {
		s += stream()
		p += poll()
	}
	b.ReportMetric(float64(s.Milliseconds())/float64(b.N), "stream_ms/ready")
	b.ReportMetric(float64(p.Milliseconds())/float64(b.N), "poll10ms_ms/ready")
	b.ReportMetric(float64(polls)/float64(b.N), "polls/ready")
	b.ReportMetric(float64(s)/float64(p), "stream/poll")
}

// BenchmarkIntrospect measures grant introspection on Postgres (the call
// Tuist services make per request they authorise) against GET /healthz
// over the same client in the same run.
func BenchmarkIntrospect(b *testing.B) {
	e := newBenchEnv(b, "postgres")
	e.addProjects()
	code, _, body := e.do("dev", "POST", "/api/v1/sandboxes", jsonBody(map[string]any{"profile": "tuist-linux-small",
		"grants": []map[string]any{{"project_id": devProject, "scopes": []string{"cache:read"}}}}))
	if code != 201 {
		b.Fatalf("create: %d %s", code, body)
	}
	var sb struct{ ID string }
	_ = json.Unmarshal(body, &sb)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for ev := range e.openStream(ctx, "dev", sb.ID, "") {
		if ev.Data.State == "ready" {
			break
		}
	}
	code, _, body = e.do("dev", "POST", "/api/v1/sandboxes/"+sb.ID+"/exec", jsonBody(map[string]string{"command": `cat "$HOME/` + lifecycle.GrantsPath + `"`}))
	var ex struct{ Stdout string }
	_ = json.Unmarshal(body, &ex)
	var file lifecycle.GrantsFile
	if err := json.Unmarshal([]byte(ex.Stdout), &file); code != 200 || err != nil {
		b.Fatalf("grants file: %d %s", code, body)
	}
	req := `{"token":"` + file.Grants[0].Token + `"}`
	intro := func() {
		if code, _, body := e.do("", "POST", "/api/v1/grants/introspect", strings.NewReader(req)); code != 200 || !strings.Contains(string(body), `"active":true`) {
			b.Fatalf("introspect: %d %s", code, body)
		}
	}
	health := func() { e.do("", "GET", "/healthz", nil) }
	i, h := alternate(b, intro, health)
	b.ReportMetric(float64(i.Microseconds())/float64(b.N), "introspect_us")
	b.ReportMetric(float64(h.Microseconds())/float64(b.N), "healthz_us")
	b.ReportMetric(float64(i)/float64(h), "introspect/healthz")
}
