package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain lets the test binary play the broker and preview children, as
// the real binary does when it re-executes itself.
func TestMain(m *testing.M) {
	for _, c := range commands {
		if c.hidden && len(os.Args) > 1 && os.Args[1] == c.name {
			if err := c.run(context.Background(), os.Args[2:]); err != nil {
				os.Stderr.WriteString(err.Error() + "\n")
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	goleak.VerifyTestMain(m)
}

// TestSSHScenariosSmoke runs every scenario at a tiny size against the
// real sshd, so the tool keeps working; the figures themselves come from
// `go run ./loadtest ssh`, never from a timed test.
func TestSSHScenariosSmoke(t *testing.T) {
	cfg := sshConfig{Server: "sshd", BulkBytes: 4 << 20, Streams: 2, HandshakeFor: 300 * time.Millisecond,
		HandshakeConc: 2, Keystrokes: 20, KeystrokeRounds: 2, Sessions: 5, ClientCipher: "chacha20-poly1305@openssh.com",
		UpstreamCiphers: "chacha20-poly1305@openssh.com", Timeout: 5 * time.Minute}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	env, err := setupSSH(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	rows, err := env.runAll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 10 {
		t.Fatalf("got %d rows, want 10: %+v", len(rows), rows)
	}
	for _, r := range rows {
		if strings.HasPrefix(r.name, "memory") {
			continue // five sessions may fit in already-mapped pages
		}
		if strings.HasPrefix(r.name, "keystroke overhead") {
			continue // differences: a fast round may put one below zero
		}
		if r.broker <= 0 || (!r.directNA && r.direct <= 0) {
			t.Errorf("%s: direct %v broker %v, want both positive", r.name, r.direct, r.broker)
		}
	}
	var out bytes.Buffer
	report(&out, rows)
	if !strings.Contains(out.String(), "broker/direct") || !strings.Contains(out.String(), "memory per idle session") {
		t.Fatalf("report:\n%s", out.String())
	}
}

func TestSSHConfigBounds(t *testing.T) {
	for name, mut := range map[string]func(*sshConfig){
		"server":   func(c *sshConfig) { c.Server = "remote.example.com" },
		"bytes":    func(c *sshConfig) { c.BulkBytes = 1 << 40 },
		"sessions": func(c *sshConfig) { c.Sessions = 100000 },
		"timeout":  func(c *sshConfig) { c.Timeout = 0 },
	} {
		c := sshConfig{Server: "sshd", BulkBytes: 1 << 20, Streams: 1, HandshakeFor: time.Second, HandshakeConc: 1,
			Keystrokes: 1, Sessions: 1, Timeout: time.Minute}
		mut(&c)
		if c.Validate() == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}
