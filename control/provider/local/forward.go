package local

import (
	"context"
	"log/slog"
	"net"

	"github.com/sbxedge/sbx/internal/podtcp"
)

// forwarder is a sandbox's podtcp forwarder on a loopback port: the
// edge's plain-TCP road to the sandbox's ports, as sbx-init serves it in
// a pod. Its instance owns it; stop ends it.
type forwarder struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when Serve has returned
}

// startForwarder serves ln with keys until stop. The keys are fixed: a
// local sandbox's host key and CA only change when it is provisioned
// again, which starts a new forwarder.
func startForwarder(ln net.Listener, keys podtcp.Keys, logger *slog.Logger) *forwarder {
	// Not the caller's ctx: that one bounds the start, and the forwarder
	// lives as long as the server.
	ctx, cancel := context.WithCancel(context.Background())
	f := &forwarder{cancel: cancel, done: make(chan struct{})}
	fw := &podtcp.Forwarder{Keys: func() (podtcp.Keys, error) { return keys, nil }, Logger: logger}
	go func() {
		defer close(f.done)
		if err := fw.Serve(ctx, ln); err != nil {
			logger.Warn("forwarder stopped", "err", err)
		}
	}()
	return f
}

// stop closes the listener and every connection and waits for them.
func (f *forwarder) stop() {
	f.cancel()
	<-f.done
}
