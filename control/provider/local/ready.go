package local

import (
	"context"
	"fmt"
	"time"

	gossh "golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/podssh"
)

// readyTimeout bounds how long a new server may take to answer.
const readyTimeout = 15 * time.Second

// probeEvery is the longest wait between two probes of a new server.
const probeEvery = 25 * time.Millisecond

// waitReady returns once addr accepts TCP and completes an SSH key
// exchange presenting want as host key, or fails when died closes, ctx
// ends or readyTimeout passes.
func waitReady(ctx context.Context, addr string, want gossh.PublicKey, died <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	var last error
	// A new server answers within milliseconds: try again soon, then
	// back off to probeEvery (a fixed 25 ms was most of create→ready).
	wait := time.Millisecond
	for {
		last = podssh.ProbeHostKey(ctx, addr, want)
		if last == nil {
			return nil
		}
		select {
		case <-died:
			return fmt.Errorf("ssh server on %s exited before it was ready (last probe: %v)", addr, last)
		case <-ctx.Done():
			return fmt.Errorf("ssh server on %s not ready: %w (last probe: %v)", addr, ctx.Err(), last)
		case <-time.After(wait):
		}
		wait = min(2*wait, probeEvery)
	}
}
