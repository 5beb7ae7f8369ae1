// Package outage logs a step that keeps failing while something it needs
// is away (Redis, the database) once when the failures start and once
// when they end, instead of on every retry: a loop that retries each
// second would otherwise bury the log in one line a second.
package outage

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// Log reports one repeated step's failures and its recovery. It is safe
// for concurrent use.
type Log struct {
	log  *slog.Logger
	what string
	now  func() time.Time

	mu       sync.Mutex // guards failures and since
	failures int        // consecutive failures; 0 while the step succeeds
	since    time.Time  // when the first of them happened
}

// New returns a Log for the step named what (as in "activity flush"),
// written to log. now is the clock (nil: time.Now).
func New(log *slog.Logger, what string, now func() time.Time) *Log {
	if now == nil {
		now = time.Now
	}
	return &Log{log: log, what: what, now: now}
}

// Failed records a failure of the step. The first of a run is logged at
// WARN with err; the rest at DEBUG, until Succeeded.
func (l *Log) Failed(ctx context.Context, err error) {
	l.mu.Lock()
	l.failures++
	first := l.failures == 1
	if first {
		l.since = l.now()
	}
	l.mu.Unlock()
	if first {
		l.log.WarnContext(ctx, l.what+" failed; retrying, and saying so again only once it succeeds", "err", err)
		return
	}
	l.log.DebugContext(ctx, l.what+" failed again", "err", err)
}

// Succeeded records a success of the step; after failures it logs one
// INFO line with how many there were and for how long.
func (l *Log) Succeeded(ctx context.Context) {
	l.mu.Lock()
	n, since := l.failures, l.since
	l.failures = 0
	l.mu.Unlock()
	if n > 0 {
		l.log.InfoContext(ctx, l.what+" succeeded again", "failures", n, "failing_for", l.now().Sub(since).Round(time.Millisecond))
	}
}
