package outage_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/outage"
)

// TestOnceEachWay: a run of failures is one WARN and one INFO when it
// ends, whatever its length; a second run is reported again.
func TestOnceEachWay(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	now := time.Unix(1000, 0)
	l := outage.New(log, "activity flush", func() time.Time { return now })
	ctx := context.Background()
	down := errors.New("dial tcp: connection refused")

	for _, tc := range []struct {
		name       string
		step       func()
		warn, info int
	}{
		{"success before any failure", func() { l.Succeeded(ctx) }, 0, 0},
		{"thirty failures", func() {
			for range 30 {
				l.Failed(ctx, down)
				now = now.Add(time.Second)
			}
		}, 1, 0},
		{"recovery", func() { l.Succeeded(ctx); l.Succeeded(ctx) }, 0, 1},
		{"a second outage", func() { l.Failed(ctx, down); l.Failed(ctx, down) }, 1, 0},
	} {
		buf.Reset()
		tc.step()
		got := buf.String()
		if w, i := strings.Count(got, "level=WARN"), strings.Count(got, "level=INFO"); w != tc.warn || i != tc.info {
			t.Errorf("%s: got %d WARN and %d INFO lines, want %d and %d:\n%s", tc.name, w, i, tc.warn, tc.info, got)
		}
		if tc.name == "recovery" && (!strings.Contains(got, "failures=30") || !strings.Contains(got, "failing_for=30s")) {
			t.Errorf("recovery line: got %q, want failures=30 failing_for=30s", got)
		}
	}
}
