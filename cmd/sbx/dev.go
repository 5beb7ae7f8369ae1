package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sbxedge/sbx/control"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/lifecycle"
)

func defaultDataDir() string {
	if d := os.Getenv("SBX_DATA_DIR"); d != "" {
		return d
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ".sbx"
	}
	return filepath.Join(home, ".sbx", "dev")
}

func runDev(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("sbx dev", flag.ContinueOnError)
	dataDir := fs.String("data-dir", defaultDataDir(), "SQLite database, keys and sandbox workspaces")
	apiAddr := fs.String("api-addr", "127.0.0.1:8080", "REST API listen address")
	sshAddr := fs.String("ssh-addr", "127.0.0.1:2222", "SSH broker listen address")
	dbURL := fs.String("database-url", os.Getenv("SBX_DATABASE_URL"), "Postgres URL (default: embedded SQLite in --data-dir)")
	provMode := fs.String("sandbox-server", "embedded", `sandbox SSH server: "embedded" (Go) or "sshd" (the machine's OpenSSH)`)
	reap := fs.Duration("reap-interval", 30*time.Second, "how often expired sandboxes are reaped")
	runJobs := fs.Bool("run-jobs", true, "work the background job queue (false: serve the API only, for maintenance and crash tests)")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	sshHost, sshPortStr, err := net.SplitHostPort(*sshAddr)
	if err != nil {
		return fmt.Errorf("--ssh-addr: %w", err)
	}
	sshPort, err := strconv.Atoi(sshPortStr)
	if err != nil {
		return fmt.Errorf("--ssh-addr port: %w", err)
	}
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}

	svc, err := control.Open(ctx, control.Config{
		DataDir: *dataDir, DatabaseURL: *dbURL, APIAddr: *apiAddr,
		SSHHost: sshHost, SSHPort: sshPort, ProviderMode: *provMode, NoJobs: !*runJobs,
		Lifecycle: lifecycle.Config{ReapInterval: *reap},
		Logger:    log,
	})
	if err != nil {
		return err
	}
	tokenFile := filepath.Join(*dataDir, "token")
	tok, fresh, err := devseed.Seed(ctx, svc.Store, os.Getenv("SBX_DEV_TOKEN"), tokenFile)
	if err != nil {
		_ = svc.Shutdown(context.Background())
		return err
	}
	if err := svc.Start(ctx); err != nil {
		_ = svc.Shutdown(context.Background())
		return err
	}
	fmt.Fprintf(os.Stderr, "\nsbx dev is up\n  API:        %s\n  data dir:   %s\n  token file: %s\n", svc.URL(), *dataDir, tokenFile)
	if fresh {
		fmt.Fprintf(os.Stderr, "  token:      %s   (shown once; also in the token file)\n", tok)
	}
	fmt.Fprintf(os.Stderr, "\nTry:\n  export SBX_API=%s SBX_TOKEN=$(cat %s)\n  sbx create && sbx list\n\n", svc.URL(), tokenFile)

	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "shutting down; sandboxes keep their workspaces")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return svc.Shutdown(shutCtx)
}
