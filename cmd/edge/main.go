// Command edge is the network edge: the SSH broker (and, as they land, the
// preview proxy), stateless and replicated. It asks control's internal API
// who may go where and signs upstream certificates with the shared CA key.
//
// It must not link the store, the job queue or Kubernetes clients; a test
// (deps_test.go) keeps it so.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/controlclient"
	"github.com/sbxedge/sbx/edge/sshbroker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := parseConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if err := run(ctx, cfg, log, nil); err != nil {
		log.Error("edge stopped", "err", err)
		os.Exit(1)
	}
}

// listening reports the bound addresses once the edge serves; tests use it
// with ":0" addresses.
type listening struct {
	SSH, HTTP net.Addr
	Preview   net.Addr // nil when previews are off
}

// run serves until ctx ends, then drains. ready, if set, is called once
// everything listens.
func run(ctx context.Context, cfg Config, log *slog.Logger, ready func(listening)) error {
	caPEM, err := os.ReadFile(cfg.CAKeyFile)
	if err != nil {
		return fmt.Errorf("read CA key: %w", err)
	}
	caSigner, err := ssh.ParsePrivateKey(caPEM)
	if err != nil {
		return fmt.Errorf("parse CA key %s: %w", cfg.CAKeyFile, err)
	}
	hostKeys, err := sshbroker.LoadOrCreateHostKeys(cfg.HostKeyDir)
	if err != nil {
		return fmt.Errorf("broker host keys: %w", err)
	}
	cc, err := controlclient.New(controlclient.Config{BaseURL: cfg.ControlURL, Secret: cfg.InternalSecret})
	if err != nil {
		return err
	}
	// Fail fast on a wrong URL or secret instead of refusing every SSH
	// login later with an opaque error.
	hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cc.Health(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("reach control's internal API: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	bcfg := sshbroker.DefaultConfig()
	bcfg.HostKeys = hostKeys
	bcfg.Authorizer = cc
	// Key holders connecting to a suspended sandbox wait while control
	// restores it.
	bcfg.Waker = cc
	act, closeAct, err := openActivity(cfg, reg, log)
	if err != nil {
		return err
	}
	defer closeAct() // after the broker drained: its connections are released first
	if act != nil {
		bcfg.Activity = act
	}
	bcfg.CA = sshca.New(caSigner)
	bcfg.Registry = reg
	bcfg.Logger = log.With("component", "sshbroker")
	bcfg.DrainPeriod = cfg.Drain
	bcfg.ClientAliveInterval = cfg.ClientAlive
	bcfg.UpstreamAliveInterval = cfg.UpstreamAlive
	broker, err := sshbroker.New(bcfg)
	if err != nil {
		return err
	}
	sshLn, err := net.Listen("tcp", cfg.SSHAddr)
	if err != nil {
		return fmt.Errorf("listen for SSH on %s: %w", cfg.SSHAddr, err)
	}
	served := make(chan error, 1) // Serve's result; buffered so Serve never blocks on exit
	go func() { served <- broker.Serve(sshLn) }()

	var ps *previewServer
	if cfg.Preview.Addr != "" {
		if ps, err = startPreview(ctx, cfg.Preview, cc, act, sshca.New(caSigner), reg, log); err != nil {
			_ = broker.Close()
			<-served
			return err
		}
	}

	var up atomic.Bool
	var hs *httpServer
	if cfg.HTTPAddr != "" {
		if hs, err = startHTTP(cfg.HTTPAddr, reg, up.Load, log); err != nil {
			_ = broker.Close()
			<-served
			if ps != nil {
				ps.close()
			}
			return err
		}
	}
	up.Store(true)
	log.Info("edge ready", "ssh", sshLn.Addr().String(), "control", cfg.ControlURL)
	if ready != nil {
		l := listening{SSH: sshLn.Addr()}
		if hs != nil {
			l.HTTP = hs.ln.Addr()
		}
		if ps != nil {
			l.Preview = ps.addr
		}
		ready(l)
	}

	var errs []error
	select {
	case <-ctx.Done():
	case err := <-served:
		served <- err // keep it for the shutdown path below
	}
	// Not ready first, so the load balancer stops sending new connections
	// while open sessions drain.
	up.Store(false)
	log.Info("edge shutting down", "drain", cfg.Drain)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.Drain+5*time.Second)
	defer cancel()
	if err := broker.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shutdown SSH broker: %w", err))
	}
	if err := <-served; err != nil && !errors.Is(err, sshbroker.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve SSH: %w", err))
	}
	if ps != nil {
		errs = append(errs, ps.shutdown(sctx))
	}
	if hs != nil {
		errs = append(errs, hs.shutdown(sctx))
	}
	return errors.Join(errs...)
}

// httpServer serves health and metrics.
type httpServer struct {
	srv  *http.Server
	ln   net.Listener
	done chan error
}

func startHTTP(addr string, reg *prometheus.Registry, ready func() bool, log *slog.Logger) (*httpServer, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n")
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen for health/metrics on %s: %w", addr, err)
	}
	hs := &httpServer{ln: ln, done: make(chan error, 1), srv: &http.Server{
		Handler: mux,
		// Probes and scrapes are tiny and local; anything slow is broken.
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}}
	go func() { hs.done <- hs.srv.Serve(ln) }()
	return hs, nil
}

func (hs *httpServer) shutdown(ctx context.Context) error {
	err := hs.srv.Shutdown(ctx)
	if serr := <-hs.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if err != nil {
		return fmt.Errorf("shutdown health/metrics: %w", err)
	}
	return nil
}
