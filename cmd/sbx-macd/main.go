// Command sbx-macd is the host agent of a Mac in a macOS pool: it drives
// the tart CLI on its own machine (control/provider/tart.CLI) and serves
// it to control's tart provider over HTTP, every request authenticated
// with the internal-API token (control/provider/tart/agent). A separate
// small binary rather than a mode of sbx: it runs under launchd on Mac
// minis that need none of the rest, links only the driver, and outlives
// control's restarts, so the VMs it supervises keep running.
//
//	SBX_MACD_TOKEN=... sbx-macd --listen 0.0.0.0:7443 --tart /opt/homebrew/bin/tart \
//	    --tls-cert /etc/sbx/macd.pem --tls-key /etc/sbx/macd-key.pem
//
// Off loopback, serve TLS (--tls-cert/--tls-key): the token is a bearer
// credential.
//
// At start it runs preflight (tart present and recent, the host's macOS
// version, free disk) and exits with what to do if that fails; a host too
// old to suspend VMs (macOS 13, tart before 1.8) runs with a warning and
// control exempts its macOS sandboxes from idle suspend. Then it prints
// "listening on ADDR".
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/agent"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "sbx-macd:", err)
		os.Exit(1)
	}
}

func run() error {
	listen := flag.String("listen", "127.0.0.1:7443", "address to serve control on")
	tartPath := flag.String("tart", "tart", "the tart binary")
	tlsCert := flag.String("tls-cert", "", "serve HTTPS with this certificate (PEM); control's hosts file names its CA with caFile")
	tlsKey := flag.String("tls-key", "", "the private key of --tls-cert")
	swVers := flag.String("sw-vers", "", "the sw_vers binary preflight reads the host's macOS version from (empty: one beside --tart, else /usr/bin/sw_vers)")
	minFree := flag.Int("min-free-gb", tart.MinFreeDiskGB, "preflight: free disk needed where tart keeps VMs")
	flag.Parse()
	if (*tlsCert == "") != (*tlsKey == "") {
		return errors.New("--tls-cert and --tls-key go together")
	}
	token := os.Getenv("SBX_MACD_TOKEN")
	if len(token) < 16 {
		return errors.New("SBX_MACD_TOKEN must hold control's internal-API token (16 characters or more)")
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d := tart.NewCLI(*tartPath, nil, logger)
	d.SwVers = *swVers
	info, err := tart.Preflight(ctx, d, *minFree)
	if err != nil {
		return fmt.Errorf("preflight: %w", err)
	}
	logger.Info("preflight passed", "tart", info.Tart, "macos", info.MacOS)
	if info.NoSuspend != "" {
		// Control reads this through the agent's own preflight and
		// exempts macOS sandboxes from idle suspend.
		logger.Warn("this host cannot suspend VMs", "why", info.NoSuspend)
	}
	var tlsConf *tls.Config
	if *tlsCert != "" {
		// Loaded before the listener, so a bad pair stops the start
		// with its reason instead of after "listening on".
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: agent.Handler(d, token), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
	fmt.Printf("listening on %s\n", ln.Addr())
	errc := make(chan error, 1)
	go func() {
		if tlsConf != nil {
			errc <- srv.ServeTLS(ln, "", "")
			return
		}
		errc <- srv.Serve(ln)
	}()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	case err := <-errc:
		return err
	}
}
