package jobqueue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
)

// Logger is logger as River should use it: River's Info records (a
// producer's job counts every few seconds while periodic jobs run, client
// starts and stops) are its own bookkeeping, so they go out at Debug;
// warnings and errors are unchanged, but for those whose error is a
// cancelled context: River's maintenance services log those at ERROR when
// the client stops under them, which every clean shutdown does. A nil
// logger stays nil (River's default).
func Logger(logger *slog.Logger) *slog.Logger {
	if logger == nil {
		return nil
	}
	return slog.New(quiet{logger.Handler()})
}

// quiet passes River's records to h with Info lowered to Debug, and those
// carrying a context.Canceled error too.
type quiet struct{ h slog.Handler }

func infoAsDebug(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (q quiet) Enabled(ctx context.Context, l slog.Level) bool {
	// A warning or error may be lowered only once its attributes are seen.
	return q.h.Enabled(ctx, infoAsDebug(l))
}

func (q quiet) Handle(ctx context.Context, r slog.Record) error {
	r.Level = infoAsDebug(r.Level)
	if r.Level > slog.LevelDebug && isCancel(r) {
		if !q.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return q.h.Handle(ctx, r)
}

func isCancel(r slog.Record) bool {
	found := false
	r.Attrs(func(a slog.Attr) bool {
		switch v := a.Value.Resolve().Any().(type) {
		case error:
			found = errors.Is(v, context.Canceled)
		case string:
			// River logs some errors as their text.
			found = a.Key == "error" && (v == context.Canceled.Error() || strings.HasSuffix(v, ": "+context.Canceled.Error()))
		}
		return !found
	})
	return found
}

func (q quiet) WithAttrs(as []slog.Attr) slog.Handler { return quiet{q.h.WithAttrs(as)} }
func (q quiet) WithGroup(name string) slog.Handler    { return quiet{q.h.WithGroup(name)} }
