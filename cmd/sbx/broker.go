package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/edge/sshbroker"
)

// brokerAuthorizer adapts control's sshauth to the broker's Authorizer.
// The adapter lives here, in the one place both sides are linked, so the
// edge never imports control and control never imports the edge.
type brokerAuthorizer struct{ a *sshauth.Authorizer }

var _ sshbroker.Authorizer = brokerAuthorizer{}

func (b brokerAuthorizer) Authorize(ctx context.Context, username, fingerprint string) (sshbroker.Route, error) {
	r, err := b.a.Authorize(ctx, username, fingerprint)
	if err != nil {
		return sshbroker.Route{}, brokerRefusal(err)
	}
	return sshbroker.Route{SandboxID: r.SandboxID, Addr: r.Addr, User: r.User, HostKey: r.HostKey, ExpiresAt: r.ExpiresAt}, nil
}

// brokerRefusal re-expresses an sshauth refusal as the broker's sentinel,
// keeping the original in the chain for logs.
func brokerRefusal(err error) error {
	for _, m := range []struct{ from, to error }{
		{sshauth.ErrUnknownKey, sshbroker.ErrUnknownKey},
		{sshauth.ErrExpired, sshbroker.ErrExpired},
		{sshauth.ErrSandboxEnded, sshbroker.ErrSandboxEnded},
		{sshauth.ErrWrongSandbox, sshbroker.ErrWrongSandbox},
		{sshauth.ErrUnknownSandbox, sshbroker.ErrUnknownSandbox},
		{sshauth.ErrNotReady, sshbroker.ErrNotReady},
	} {
		if errors.Is(err, m.from) {
			return fmt.Errorf("%w (%w)", m.to, err)
		}
	}
	// Store faults stay faults: the broker refuses without a reason.
	return err
}

// devBroker is the SSH broker `sbx dev` runs next to control.
type devBroker struct {
	b    *sshbroker.Broker
	ln   net.Listener
	done chan error // Serve's result; buffered so Serve never blocks on exit
	log  *slog.Logger
}

// startBroker builds the broker on ln and starts serving. Host keys live
// in <data-dir>/keys/broker so clients see the same key across restarts.
func startBroker(svc *control.Service, ln net.Listener, dataDir string, drain time.Duration, log *slog.Logger) (*devBroker, error) {
	keys, err := sshbroker.LoadOrCreateHostKeys(filepath.Join(dataDir, "keys", "broker"))
	if err != nil {
		return nil, fmt.Errorf("broker host keys: %w", err)
	}
	cfg := sshbroker.DefaultConfig()
	cfg.HostKeys = keys
	cfg.Authorizer = brokerAuthorizer{sshauth.New(svc.Store, nil, log)}
	cfg.CA = svc.CA
	// Control's activity store and wake, handed over in-process: the
	// broker marks SSH traffic and heartbeats open connections there, and
	// wakes suspended sandboxes for key holders.
	cfg.Activity = svc.Activity
	cfg.Waker = svc
	cfg.Registry = svc.Registry
	cfg.Logger = log.With("component", "sshbroker")
	cfg.DrainPeriod = drain
	b, err := sshbroker.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("start SSH broker: %w", err)
	}
	d := &devBroker{b: b, ln: ln, done: make(chan error, 1), log: log}
	go func() { d.done <- b.Serve(ln) }()
	return d, nil
}

// shutdown drains open sessions for up to the drain period, then closes
// them with a message, and waits for Serve to return.
func (d *devBroker) shutdown(ctx context.Context) error {
	err := d.b.Shutdown(ctx)
	if serr := <-d.done; serr != nil && !errors.Is(serr, sshbroker.ErrServerClosed) {
		err = errors.Join(err, fmt.Errorf("serve SSH: %w", serr))
	}
	if err != nil {
		return fmt.Errorf("shutdown SSH broker: %w", err)
	}
	return nil
}
