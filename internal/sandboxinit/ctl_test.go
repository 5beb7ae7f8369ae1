package sandboxinit

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/testkit/sshscenario"
	"github.com/sbxedge/sbx/internal/testkit/waitfor"
)

// serveSocket serves s's control protocol on a unix socket in a fresh
// directory until the test ends, and returns the directory.
func serveSocket(t *testing.T, s *Supervisor) string {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("unix", SocketPath(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- s.ServeListener(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("ServeListener: %v", err)
		}
	})
	return dir
}

// TestCtl: the control command relays one call to the init's socket,
// named by --socket or found in --run-dir (or $SBX_RUN_DIR), and says
// what went wrong with exit codes 1 (no init) and 2 (usage).
func TestCtl(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "idle", Command: "sleep 30"}); err != nil {
		t.Fatal(err)
	}
	dir := serveSocket(t, s)
	noEnv := func(string) string { return "" }
	tests := []struct {
		name   string
		args   []string
		getenv func(string) string
		code   int
		stderr string
	}{
		{"socket flag", []string{"--socket", SocketPath(dir)}, noEnv, 0, ""},
		{"run dir flag", []string{"--run-dir", dir}, noEnv, 0, ""},
		{"run dir variable", nil, func(k string) string {
			if k == "SBX_RUN_DIR" {
				return dir
			}
			return ""
		}, 0, ""},
		{"no init there", []string{"--run-dir", t.TempDir()}, noEnv, 1, "ctl: reach the init"},
		{"unknown flag", []string{"--sockett", "x"}, noEnv, 2, "flag provided but not defined"},
		{"extra argument", []string{"--socket", SocketPath(dir), "list"}, noEnv, 2, `unexpected arguments ["list"]`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Ctl(t.Context(), "ctl", tt.args, tt.getenv, strings.NewReader(`{"op":"list"}`+"\n"), &out, &errOut)
			if code != tt.code || !strings.Contains(errOut.String(), tt.stderr) {
				t.Fatalf("Ctl = %d, stderr %q; want %d and %q", code, errOut.String(), tt.code, tt.stderr)
			}
			if tt.code != 0 {
				return
			}
			var resp Response
			if err := json.Unmarshal(out.Bytes(), &resp); err != nil || len(resp.Services) != 1 || resp.Services[0].Name != "idle" {
				t.Fatalf("relayed answer %q (%v), want the list with idle", out.String(), err)
			}
		})
	}
}

// TestRelayEndsWithContext: a followed log through the relay ends when
// the relay's context does (SIGTERM to sbx sandbox-init ctl), even while
// the SSH side keeps its stdin open.
func TestRelayEndsWithContext(t *testing.T) {
	s := newSup(t)
	if err := s.Put(Service{Name: "quiet", Command: "echo once; sleep 30"}); err != nil {
		t.Fatal(err)
	}
	dir := serveSocket(t, s)
	in, inW := io.Pipe()
	defer inW.Close()
	out := &sshscenario.SyncBuffer{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- Relay(ctx, SocketPath(dir), in, out) }()
	if _, err := io.WriteString(inW, `{"op":"logs","name":"quiet","follow":true}`+"\n"); err != nil {
		t.Fatal(err)
	}
	if !waitfor.Try(t, 10*time.Second, func() bool { return strings.Contains(out.String(), "once") }) {
		t.Fatalf("no log line relayed: %q", out.String())
	}
	select {
	case err := <-done:
		t.Fatalf("Relay returned %v while following", err)
	case <-time.After(100 * time.Millisecond):
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("Relay = %v, want context.Canceled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Relay still running 5s after its context ended")
	}
}
