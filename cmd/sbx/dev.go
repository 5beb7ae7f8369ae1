package main

import (
	"context"
	"errors"
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
	sshDrain := fs.Duration("ssh-drain", 10*time.Second, "on shutdown, how long open SSH sessions may finish before they are closed")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	previewAddr := fs.String("preview-addr", "127.0.0.1:8081", "preview proxy listen address (plain HTTP and h2c)")
	var po previewOptions
	fs.StringVar(&po.domain, "preview-domain", "preview.localhost", "preview base domain: ports are served at <label>.<domain>, sign-in at <domain>")
	fs.StringVar(&po.issuer, "oidc-issuer", os.Getenv("SBX_OIDC_ISSUER"), "OIDC issuer for preview sign-in (empty: a local dev sign-in for the dev account)")
	fs.StringVar(&po.clientID, "oidc-client-id", os.Getenv("SBX_OIDC_CLIENT_ID"), "OIDC client id")
	fs.StringVar(&po.clientSecret, "oidc-client-secret", os.Getenv("SBX_OIDC_CLIENT_SECRET"), "OIDC client secret (prefer the environment variable)")
	fs.StringVar(&po.membersFile, "preview-members", os.Getenv("SBX_PREVIEW_MEMBERS"), "JSON file mapping OIDC identities to accounts (see README)")
	idleTimeout := fs.Duration("idle-timeout", 5*time.Minute, "suspend ready sandboxes with no activity and no open connection for this long")
	redisURL := fs.String("redis-url", os.Getenv("SBX_REDIS_URL"), "Redis URL for activity and wake notifications (default: in memory, this process only)")
	redisPrefix := fs.String("redis-prefix", "sbx:activity:", "prefix of every activity key in Redis, to share one Redis")
	activityRetry := fs.Duration("activity-retry", 30*time.Second, "how long activity marks are retried while Redis is unreachable before they are dropped (and counted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	if err := os.MkdirAll(*dataDir, 0o700); err != nil {
		return fmt.Errorf("create data dir: %w", err)
	}
	// Listen for SSH before anything else: the API reports the broker's
	// real port (--ssh-addr may say :0), and readyz turns 200 only after
	// the broker accepts.
	sshLn, err := net.Listen("tcp", *sshAddr)
	if err != nil {
		return fmt.Errorf("listen for SSH on %s: %w", *sshAddr, err)
	}
	sshHost, sshPort, err := publicSSHAddr(sshLn.Addr())
	if err != nil {
		sshLn.Close()
		return err
	}

	previewLn, err := net.Listen("tcp", *previewAddr)
	if err != nil {
		sshLn.Close()
		return fmt.Errorf("listen for previews on %s: %w", *previewAddr, err)
	}
	previewPort := previewLn.Addr().(*net.TCPAddr).Port
	var inv previewInvalidator

	svc, err := control.Open(ctx, control.Config{
		DataDir: *dataDir, DatabaseURL: *dbURL, APIAddr: *apiAddr,
		SSHHost: sshHost, SSHPort: sshPort, ProviderMode: *provMode, NoJobs: !*runJobs,
		PreviewDomain: po.domain, PreviewScheme: "http", PreviewPort: previewPort, PreviewChanged: inv.changed,
		Lifecycle: lifecycle.Config{ReapInterval: *reap, IdleTimeout: *idleTimeout},
		RedisURL:  *redisURL, RedisPrefix: *redisPrefix, ActivityRetry: *activityRetry,
		Logger: log,
	})
	if err != nil {
		sshLn.Close()
		previewLn.Close()
		return err
	}
	broker, err := startBroker(svc, sshLn, *dataDir, *sshDrain, log)
	if err != nil {
		sshLn.Close()
		previewLn.Close()
		_ = svc.Shutdown(context.Background())
		return err
	}
	prev, err := startPreview(ctx, svc, &inv, previewLn, *dataDir, po, log)
	if err != nil {
		previewLn.Close()
		_ = broker.b.Close()
		<-broker.done
		_ = svc.Shutdown(context.Background())
		return err
	}
	// fail undoes everything started so far.
	fail := func(err error) error {
		_ = prev.shutdown(context.Background())
		_ = broker.b.Close()
		<-broker.done
		_ = svc.Shutdown(context.Background())
		return err
	}
	tokenFile := filepath.Join(*dataDir, "token")
	tok, fresh, err := devseed.Seed(ctx, svc.Store, os.Getenv("SBX_DEV_TOKEN"), tokenFile)
	if err != nil {
		return fail(err)
	}
	if err := svc.Start(ctx); err != nil {
		return fail(err)
	}
	fmt.Fprintf(os.Stderr, "\nsbx dev is up\n  API:        %s\n  SSH broker: %s\n  previews:   http://<label>.%s:%d\n  data dir:   %s\n  token file: %s\n",
		svc.URL(), net.JoinHostPort(sshHost, strconv.Itoa(sshPort)), po.domain, previewPort, *dataDir, tokenFile)
	if fresh {
		fmt.Fprintf(os.Stderr, "  token:      %s   (shown once; also in the token file)\n", tok)
	}
	fmt.Fprintf(os.Stderr, "\nTry:\n  export SBX_API=%s SBX_TOKEN=$(cat %s)\n  sbx create && sbx list\n  sbx ssh <id>\n\n", svc.URL(), tokenFile)

	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "shutting down; sandboxes keep their workspaces")
	// SSH first: its sessions need the sandbox servers that control's
	// shutdown stops.
	brokerCtx, cancelBroker := context.WithTimeout(context.Background(), *sshDrain+5*time.Second)
	defer cancelBroker()
	berr := broker.shutdown(brokerCtx)
	prevCtx, cancelPrev := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelPrev()
	berr = errors.Join(berr, prev.shutdown(prevCtx))
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return errors.Join(berr, svc.Shutdown(shutCtx))
}

// publicSSHAddr is the address clients are told to connect to: the
// listener's, with a wildcard host replaced by loopback, which is what a
// laptop user can reach.
func publicSSHAddr(a net.Addr) (string, int, error) {
	host, portStr, err := net.SplitHostPort(a.String())
	if err != nil {
		return "", 0, fmt.Errorf("SSH listener address %s: %w", a, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return "", 0, fmt.Errorf("SSH listener port %s: %w", portStr, err)
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
	}
	return host, port, nil
}
