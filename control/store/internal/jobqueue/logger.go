package jobqueue

import (
	"context"
	"errors"
	"log/slog"
	"strings"

	"github.com/sbxedge/sbx/internal/demotelog"
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
	return demotelog.Info(slog.New(cancelled{logger.Handler()}))
}

// cancelled demotes records carrying a context.Canceled error to Debug.
type cancelled struct{ h slog.Handler }

func (c cancelled) Enabled(ctx context.Context, l slog.Level) bool {
	// A record may be demoted only once its attributes are seen.
	return c.h.Enabled(ctx, l)
}

func (c cancelled) Handle(ctx context.Context, r slog.Record) error {
	if r.Level > slog.LevelDebug && isCancel(r) {
		if !c.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return c.h.Handle(ctx, r)
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

func (c cancelled) WithAttrs(as []slog.Attr) slog.Handler { return cancelled{c.h.WithAttrs(as)} }
func (c cancelled) WithGroup(name string) slog.Handler    { return cancelled{c.h.WithGroup(name)} }
