package lifecycle

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestTickWorkerLogsOutageOnce: a periodic step that fails at every tick
// (the idle check while Redis is down: a WARN line every few seconds
// under `sbx dev`) is logged once when it starts failing and once when it
// succeeds again.
func TestTickWorkerLogsOutageOnce(t *testing.T) {
	var logs bytes.Buffer
	var fail error
	w := newTickWorker[IdleCheckArgs]("idle check", func(context.Context) error { return fail },
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))
	ctx := context.Background()

	fail = errors.New("read activity, suspending nothing: connection refused")
	for range 5 {
		if err := w.Work(ctx, nil); err == nil {
			t.Fatal("a failed step returned no error")
		}
	}
	fail = nil
	for range 2 {
		if err := w.Work(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := logs.String()
	if strings.Count(got, "level=WARN") != 1 || strings.Count(got, "level=INFO") != 1 {
		t.Errorf("five failures, then two successes, logged:\n%s\nwant one WARN and one INFO line", got)
	}
}

// flakyActivity is an activity store whose Publish fails while err is set.
type flakyActivity struct {
	Activity
	err error
}

func (f *flakyActivity) Publish(context.Context, string) error { return f.err }

// TestPublishLogsOutageOnce: state changes published while Redis is away
// (each wake, suspend and delete under `sbx dev` logged a WARN "publish
// state change" of its own) are logged once, and once on recovery.
func TestPublishLogsOutageOnce(t *testing.T) {
	var logs bytes.Buffer
	act := &flakyActivity{err: errors.New("publish wake: dial tcp: connection refused")}
	m := New(Config{}, Deps{Activity: act, Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	ctx := context.Background()
	for _, id := range []string{"sbx-a", "sbx-b", "sbx-c", "sbx-a"} {
		m.publish(ctx, id)
	}
	act.err = nil
	m.publish(ctx, "sbx-a")
	got := logs.String()
	if strings.Count(got, "level=WARN") != 1 || strings.Count(got, "level=INFO") != 1 {
		t.Errorf("four failed publications, then one that worked, logged:\n%s\nwant one WARN and one INFO line", got)
	}
}
