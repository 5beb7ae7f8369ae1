package main

import (
	"context"
	"slices"
	"testing"
	"time"
)

// TestPreviewPathsSmoke sends small requests, a download and WebSocket
// echoes through every column but nginx and Caddy at a tiny size, so the
// paths keep working on both roads (the port forwarder and SSH), the bare
// transports among them; the figures come
// from `go run ./loadtest preview`.
func TestPreviewPathsSmoke(t *testing.T) {
	c := previewConfig{Duration: 1500 * time.Millisecond, // long enough for a first SSH handshake on a loaded machine
		Conns: intList{2}, Download: 1 << 20, WSRounds: 5, Server: "sshd",
		NoNginx: true, NoCaddy: true, Rounds: 1, SSHConns: 1, IdleConns: 4}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := setupPreview(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer env.close()
	var names []string
	for _, p := range env.paths {
		names = append(names, p.name)
	}
	// The proxy comes last: the table's ratios are to it.
	if want := []string{"direct", bareColumn, bareFwdColumn, "proxy-ssh", "proxy"}; !slices.Equal(names, want) {
		t.Fatalf("paths %q, want %q", names, want)
	}
	for _, p := range env.paths {
		r, err := smallRequests(ctx, p, c, c.Conns[0])
		if err != nil || r.rps <= 0 || r.firstP99 <= 0 {
			t.Errorf("%s: small requests: %+v, %v", p.name, r, err)
		}
		if mib, err := download(ctx, p, c.Download); err != nil || mib <= 0 {
			t.Errorf("%s: download: %v MiB/s, %v", p.name, mib, err)
		}
		if p50, _, err := wsEcho(ctx, p, c.WSRounds); err != nil || p50 < 0 {
			t.Errorf("%s: websocket echo: p50 %v µs, %v", p.name, p50, err)
		}
	}
}
