package jobqueue

import (
	"context"
	"log/slog"
)

// Logger is logger as River should use it: River's Info records (a
// producer's job counts every few seconds while periodic jobs run, client
// starts and stops) are its own bookkeeping, so they go out at Debug;
// warnings and errors are unchanged. A nil logger stays nil (River's
// default).
func Logger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return nil
	}
	return slog.New(demoteInfo{logger.Handler()})
}

// demoteInfo passes records to its handler with Info lowered to Debug.
type demoteInfo struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demoteInfo) WithAttrs(as []slog.Attr) slog.Handler { return demoteInfo{d.h.WithAttrs(as)} }
func (d demoteInfo) WithGroup(name string) slog.Handler    { return demoteInfo{d.h.WithGroup(name)} }
