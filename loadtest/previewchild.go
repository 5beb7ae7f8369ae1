package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/podssh"
)

// previewChildCmd runs the preview proxy in its own process, so its CPU
// time per request can be read from /proc apart from the load
// generator's and the upstream's, as nginx's and Caddy's are.
const previewChildCmd = "_preview-proxy"

// previewChildConfig is what the parent writes to preview.json.
type previewChildConfig struct {
	Route        preview.Route `json:"route"`
	ReverseProxy bool          `json:"reverse_proxy"` // DisableLeanRelay
	IdlePerHost  int           `json:"idle_per_host"`
}

// runPreviewChild serves the proxy on 127.0.0.1, prints its address on
// stdout, and stops when stdin closes.
func runPreviewChild(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet(previewChildCmd, flag.ContinueOnError)
	dir := fs.String("dir", "", "directory with ca_key and the config file")
	file := fs.String("config", "preview.json", "config file in dir")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var c previewChildConfig
	caSigner, err := readChildInput(*dir, *file, &c)
	if err != nil {
		return err
	}
	pool := podssh.NewPool(sshca.New(caSigner), nil, podssh.WithKeyID("loadtest"))
	defer pool.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	pcfg := preview.DefaultConfig()
	pcfg.Domain, pcfg.Scheme = "preview.localhost", "http"
	pcfg.Resolver = staticRoutes{c.Route}
	pcfg.Pods = pool
	pcfg.Accounts = oneToken{tok: "sbx_at_loadtest", acct: c.Route.AccountID}
	pcfg.SessionKey = key
	pcfg.DevSignIn = &preview.DevSignIn{AccountID: c.Route.AccountID, User: "load"}
	pcfg.MaxRequestsPerHost = 4096
	pcfg.MaxIdleUpstreamPerHost = c.IdlePerHost
	pcfg.DisableLeanRelay = c.ReverseProxy
	px, err := preview.New(ctx, pcfg)
	if err != nil {
		return err
	}
	defer px.Close()
	srv := preview.NewServer(px, slog.New(slog.DiscardHandler), true)
	return serveChild(ctx, srv.Serve, srv.Close, func(err error) bool {
		return errors.Is(err, net.ErrClosed) || err.Error() == "http: Server closed"
	})
}

// startPreviewChild runs `loadtest _preview-proxy` (this binary) with c
// written to dir, and returns its address, pid and a stop.
func startPreviewChild(dir, name string, c previewChildConfig) (addr string, pid int, stop func(), err error) {
	file := "preview-" + name + ".json"
	b, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
		return "", 0, nil, err
	}
	cmd, stdin, addr, err := startChild("preview proxy", previewChildCmd, "--dir", dir, "--config", file)
	if err != nil {
		return "", 0, nil, err
	}
	return addr, cmd.Process.Pid, func() { stdin.Close(); _ = cmd.Wait() }, nil
}
