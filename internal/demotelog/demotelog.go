// Package demotelog lowers a library's Info records to Debug: River's
// and the MCP SDK's Info lines are their own bookkeeping (job counts
// every few seconds, a line per stateless request), not events of ours.
// Warnings and errors pass unchanged.
package demotelog

import (
	"context"
	"log/slog"
)

// Info returns logger with Info records logged at Debug; nil stays nil.
func Info(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return nil
	}
	return slog.New(handler{logger.Handler()})
}

// handler passes records to h with Info lowered to Debug.
type handler struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d handler) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d handler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d handler) WithAttrs(as []slog.Attr) slog.Handler { return handler{d.h.WithAttrs(as)} }
func (d handler) WithGroup(name string) slog.Handler    { return handler{d.h.WithGroup(name)} }
