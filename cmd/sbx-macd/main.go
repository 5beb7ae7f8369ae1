// Command sbx-macd is the host agent of a Mac in a macOS pool: it drives
// the tart CLI on its own machine (control/provider/tart.CLI) and serves
// it to control's tart provider over HTTP, every request authenticated
// with the internal-API token (control/provider/tart/agent). A separate
// small binary rather than a mode of sbx: it runs under launchd on Mac
// minis that need none of the rest, links only the driver (and the S3
// client its bundles go through), and outlives
// control's restarts, so the VMs it supervises keep running.
//
//	SBX_MACD_TOKEN=... sbx-macd --listen 0.0.0.0:7443 --tart /opt/homebrew/bin/tart \
//	    --tls-cert /etc/sbx/macd.pem --tls-key /etc/sbx/macd-key.pem
//
// Off loopback, serve TLS (--tls-cert/--tls-key): the token is a bearer
// credential.
//
// With --s3-endpoint (and --s3-bucket, --s3-access-key-file,
// --s3-secret-key-file: keys only ever from files or AWS_* variables) the
// agent moves its suspended VMs' bundles to and from that bucket itself,
// zstd-compressed, when control asks with a key: the gigabytes go from the
// Mac's disk to the bucket and never through control. Without it,
// suspended VMs stay on the Mac's disk and control logs that this host has
// no object storage. Every agent of one control names the same bucket, so
// a VM suspended on one Mac wakes on another.
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

	"github.com/sbxedge/sbx/cmd/internal/flagenv"
	"github.com/sbxedge/sbx/control/provider/tart"
	"github.com/sbxedge/sbx/control/provider/tart/agent"
	"github.com/sbxedge/sbx/control/provider/tart/s3bundles"
	"github.com/sbxedge/sbx/internal/objstore"
)

// s3Flags are the object storage this Mac's suspended VMs go to.
type s3Flags struct {
	endpoint, bucket, region     string
	accessKeyFile, secretKeyFile string
}

func (f s3Flags) config(getenv func(string) string) (objstore.Config, error) {
	access, err := flagenv.Secret("--s3-access-key-file", f.accessKeyFile, getenv("AWS_ACCESS_KEY_ID"))
	if err != nil {
		return objstore.Config{}, err
	}
	secret, err := flagenv.Secret("--s3-secret-key-file", f.secretKeyFile, getenv("AWS_SECRET_ACCESS_KEY"))
	if err != nil {
		return objstore.Config{}, err
	}
	if access == "" || secret == "" {
		return objstore.Config{}, errors.New("--s3-endpoint: set --s3-access-key-file (or AWS_ACCESS_KEY_ID) and --s3-secret-key-file (or AWS_SECRET_ACCESS_KEY)")
	}
	cfg := objstore.Config{Bucket: f.bucket, Region: f.region, AccessKey: access, SecretKey: secret}
	cfg.SetEndpoint(f.endpoint)
	if err := cfg.Validate(); err != nil {
		return objstore.Config{}, fmt.Errorf("--s3-endpoint: %w", err)
	}
	return cfg, nil
}

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
	s3 := s3Flags{}
	flag.StringVar(&s3.endpoint, "s3-endpoint", "", "S3-compatible object storage (http://HOST:PORT, https://HOST:PORT, or HOST:PORT for HTTPS) this Mac uploads its suspended VMs' bundles to, freeing its disk (empty: suspended VMs stay on this Mac)")
	flag.StringVar(&s3.bucket, "s3-bucket", "sbx-macos-bundles", "with --s3-endpoint: the bucket, made if missing; every Mac of a pool names the same one")
	flag.StringVar(&s3.region, "s3-region", os.Getenv("AWS_REGION"), "with --s3-endpoint: the region signed for (most non-AWS servers take any)")
	flag.StringVar(&s3.accessKeyFile, "s3-access-key-file", "", "with --s3-endpoint: a file holding the access key id (default: $AWS_ACCESS_KEY_ID)")
	flag.StringVar(&s3.secretKeyFile, "s3-secret-key-file", "", "with --s3-endpoint: a file holding the secret key (default: $AWS_SECRET_ACCESS_KEY)")
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
	var drv tart.Driver = d
	if s3.endpoint != "" {
		cfg, err := s3.config(os.Getenv)
		if err != nil {
			return err
		}
		// Opened (and the bucket made) now, so a wrong endpoint or key
		// stops the start rather than the first suspend.
		store, err := s3bundles.Open(ctx, cfg)
		if err != nil {
			return fmt.Errorf("--s3-endpoint %s: %w", s3.endpoint, err)
		}
		drv = tart.WithBundles(d, store)
		logger.Info("suspended VMs go to object storage", "endpoint", cfg.Endpoint, "bucket", cfg.Bucket)
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
	srv := &http.Server{Handler: agent.Handler(drv, token), ReadHeaderTimeout: 10 * time.Second, TLSConfig: tlsConf}
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
