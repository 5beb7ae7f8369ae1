package jobqueue

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestLoggerDemotesInfo(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		want  []string // lines that must appear, in order
	}{
		{slog.LevelInfo, []string{"level=WARN msg=w", "level=ERROR msg=e", `level=ERROR msg=e2 error="read: EOF"`}},
		{slog.LevelDebug, []string{"level=DEBUG msg=d", "level=DEBUG msg=i component=river", "level=WARN msg=w", "level=ERROR msg=e",
			`level=DEBUG msg=stopping error="begin: context canceled"`, `level=ERROR msg=e2 error="read: EOF"`, `level=DEBUG msg=stopping error="context canceled"`}},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			var buf bytes.Buffer
			base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
				Level:       tc.level,
				ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr { return dropTime(a) },
			}))
			l := Logger(base)
			l.Debug("d")
			l.With("component", "river").Info("i")
			l.Warn("w")
			l.Error("e")
			// River's maintenance logs a cancelled context at ERROR when
			// the client stops: a clean shutdown's, not an error.
			l.Error("stopping", "error", fmt.Errorf("begin: %w", context.Canceled))
			l.Error("e2", "error", fmt.Errorf("read: %w", io.EOF))
			l.Error("stopping", "error", "context canceled")
			got := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("logged:\n%s\nwant:\n%s", buf.String(), strings.Join(tc.want, "\n"))
			}
		})
	}
	if Logger(nil) != nil {
		t.Error("Logger(nil) is not nil")
	}
}

func dropTime(a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
