package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
)

// brokerChildCmd runs the broker in its own process so its CPU time and
// memory can be read from /proc without the load generator's.
const brokerChildCmd = "_ssh-broker"

// childRoute is one credential the child broker accepts.
type childRoute struct {
	Username    string          `json:"username"`
	Fingerprint string          `json:"fingerprint"`
	Route       sshbroker.Route `json:"route"`
}

// staticAuthorizer answers from a fixed table: the figures are about the
// relay, and the control round trip is cached in production anyway.
type staticAuthorizer map[string]childRoute

func (a staticAuthorizer) Authorize(_ context.Context, username, fp string) (sshbroker.Route, error) {
	r, ok := a[fp]
	if !ok {
		return sshbroker.Route{}, sshbroker.ErrUnknownKey
	}
	if r.Username != username {
		return sshbroker.Route{}, sshbroker.ErrWrongSandbox
	}
	return r.Route, nil
}

// runBrokerChild serves the broker on 127.0.0.1, prints its address on
// stdout, and stops when stdin closes (the parent exited or is done).
func runBrokerChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(brokerChildCmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with ca_key and routes.json")
	cipher := fs.String("upstream-cipher", "", "cipher on the broker-to-sandbox leg (empty: the broker's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var routes []childRoute
	caSigner, err := readChildInput(*dir, "routes.json", &routes)
	if err != nil {
		return err
	}
	auth := staticAuthorizer{}
	for _, r := range routes {
		auth[r.Fingerprint] = r
	}
	keys, err := sshbroker.LoadOrCreateHostKeys(filepath.Join(*dir, "broker_keys"))
	if err != nil {
		return err
	}
	cfg := sshbroker.DefaultConfig()
	cfg.HostKeys = keys
	cfg.Authorizer = auth
	cfg.CA = sshca.New(caSigner)
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.MaxConnsPerSandbox = 1 << 14 // the memory scenario holds thousands on one sandbox
	cfg.FailedAuthBurst = 1 << 14
	cfg.SourceFailedAuthBurst = 1 << 14
	if *cipher != "" {
		cfg.UpstreamCiphers = strings.Split(*cipher, ",")
	}
	b, err := sshbroker.New(cfg)
	if err != nil {
		return err
	}
	return serveChild(ctx, b.Serve, b.Close, func(err error) bool { return errors.Is(err, sshbroker.ErrServerClosed) })
}

// tcpRelayChildCmd runs a plain Go TCP relay (internal/testkit/tcpproxy) to its
// one argument's address in its own process: the keystroke figure's
// floor, measured as the broker is, across a process boundary.
const tcpRelayChildCmd = "_tcp-relay"

func runTCPRelayChild(ctx context.Context, args []string) error {
	if len(args) != 1 {
		return errors.New(tcpRelayChildCmd + ": want the address to relay to")
	}
	relay, err := tcpproxy.Listen(args[0])
	if err != nil {
		return err
	}
	fmt.Println(relay.Addr)
	waitParent(ctx)
	relay.Stop()
	return nil
}
