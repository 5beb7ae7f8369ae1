package mcpserver

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestSDKLoggerDemotesInfo: the SDK's INFO chatter reaches our log at
// DEBUG; its warnings and errors stay what they are.
func TestSDKLoggerDemotesInfo(t *testing.T) {
	var buf bytes.Buffer
	l := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	l.Info("session started", "session_id", "")
	if buf.Len() != 0 {
		t.Errorf("INFO at an INFO logger: %q, want nothing", buf.String())
	}
	l.With("k", "v").Warn("bad request")
	if !strings.Contains(buf.String(), "level=WARN") || !strings.Contains(buf.String(), "k=v") {
		t.Errorf("WARN: %q, want it kept with its attributes", buf.String())
	}
	buf.Reset()
	d := sdkLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	d.Info("session started")
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Errorf("INFO at a DEBUG logger: %q, want it at DEBUG", buf.String())
	}
	if sdkLogger(nil) == nil {
		t.Error("nil logger: want a discarding one")
	}
}
