package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
)

// scaleStack is control and the edge as their real binaries, on a
// scratch Postgres database and a private redis-server, with the
// simulated fleet as control's provider. Everything listens on
// loopback; close stops it all and drops the database.
type scaleStack struct {
	dir, dbURL           string
	edgeMetrics          string
	apiURL, token        string
	tokens               []string // one per --accounts; tokens[0] is token
	sshAddr, previewAddr string
	redisAddr            string
	sessionKey           []byte
	issuer               string
	control, edge, redis *exec.Cmd
	cleanup              []func()
	appPorts             [2]int // the sandboxes' app, twice (a public and a private port)
	apps                 [2]*exec.Cmd
	accountID            string
}

const (
	scaleDomain  = "preview.localhost"
	scaleSubject = "loadtest-user"
)

// freePort asks the kernel for a loopback port (a small race with the
// child that then binds it, acceptable for a tool).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (s *scaleStack) close() {
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
	_ = os.RemoveAll(s.dir)
}

// stopChild ends a child with SIGTERM, then SIGKILL after grace.
func stopChild(cmd *exec.Cmd, grace time.Duration) {
	if cmd == nil || cmd.Process == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		_ = cmd.Process.Kill()
		<-done
	}
}

// waitListening polls addr until it accepts, for at most d.
func waitListening(ctx context.Context, addr string, d time.Duration) error {
	end := time.Now().Add(d)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(end) || ctx.Err() != nil {
			return fmt.Errorf("%s not listening after %v: %w", addr, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *scaleStack) start(ctx context.Context, c *scaleConfig) (err error) {
	if s.dir, err = os.MkdirTemp("", "sbx-loadtest-scale-"); err != nil {
		return err
	}
	write := func(name string, b []byte) (string, error) {
		p := filepath.Join(s.dir, name)
		return p, os.WriteFile(p, b, 0o600)
	}
	// Redis, private to this run: its command counts are this run's.
	rp, err := freePort()
	if err != nil {
		return err
	}
	s.redisAddr = "127.0.0.1:" + strconv.Itoa(rp)
	s.redis = exec.Command(c.RedisServer, "--port", strconv.Itoa(rp), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--maxclients", "10000")
	if err := s.redis.Start(); err != nil {
		return fmt.Errorf("start %s: %w", c.RedisServer, err)
	}
	s.cleanup = append(s.cleanup, func() { stopChild(s.redis, 5*time.Second) })
	if err := waitListening(ctx, s.redisAddr, 10*time.Second); err != nil {
		return err
	}

	// Postgres: a scratch database.
	admin, err := pgx.Connect(ctx, c.AdminURL)
	if err != nil {
		return fmt.Errorf("connect admin database: %w", err)
	}
	db := fmt.Sprintf("sbx_loadtest_scale_%d", time.Now().UnixNano())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+db); err != nil {
		admin.Close(ctx)
		return fmt.Errorf("create scratch database: %w", err)
	}
	s.cleanup = append(s.cleanup, func() {
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
		admin.Close(context.Background())
	})
	cc := admin.Config()
	dbURL := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cc.User, cc.Host, cc.Port, db)
	s.dbURL = dbURL

	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	secretFile, err := write("internal_secret", []byte(hex.EncodeToString(secret)))
	if err != nil {
		return err
	}
	// Text, not raw bytes: the edge trims white space around a key file's
	// contents, so a raw key starting or ending in such a byte (about 1
	// run in 20) came out short and the edge refused to start.
	s.sessionKey = []byte(randHex(32))
	keyFile, err := write("session_key", s.sessionKey)
	if err != nil {
		return err
	}
	oidcSecret, err := write("oidc_secret", []byte("loadtest"))
	if err != nil {
		return err
	}
	// The edge discovers its OIDC issuer at start; a stub answers. No
	// browser signs in: the session cookie is sealed here (scaleCookie).
	issuerLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.issuer = "http://" + issuerLn.Addr().String()
	isrv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": s.issuer, "authorization_endpoint": s.issuer + "/auth",
			"token_endpoint": s.issuer + "/token", "jwks_uri": s.issuer + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})}
	go func() { _ = isrv.Serve(issuerLn) }()
	s.cleanup = append(s.cleanup, func() { _ = isrv.Close() })
	s.accountID = devseed.AccountID
	members, _ := json.Marshal([]map[string]string{{"account_id": s.accountID, "issuer": s.issuer, "subject": scaleSubject}})
	membersFile, err := write("members.json", members)
	if err != nil {
		return err
	}

	ports := make([]int, 6)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return err
		}
	}
	apiAddr, internalAddr, sshAddr := addrOf(ports[0]), addrOf(ports[1]), addrOf(ports[2])
	previewAddr, edgeMetrics := addrOf(ports[3]), addrOf(ports[4])
	s.sshAddr, s.previewAddr, s.apiURL = sshAddr, previewAddr, "http://"+apiAddr
	s.edgeMetrics = edgeMetrics
	redisURL := "redis://" + s.redisAddr + "/0"
	logLevel := "warn"

	dataDir := filepath.Join(s.dir, "control")
	s.control = exec.Command(filepath.Join(c.BinDir, "control"),
		"--data-dir", dataDir, "--api-addr", apiAddr, "--internal-addr", internalAddr, "--metrics-addr", "",
		"--internal-secret-file", secretFile, "--ssh-public-addr", sshAddr, "--provider", "internal-simfleet",
		"--redis-url", redisURL, "--no-idle-offload", "--preview-domain", scaleDomain, "--preview-members", membersFile,
		"--reconcile-interval", "1h", "--log-level", logLevel, "--api-max-conns", "4096")
	s.control.Env = append(os.Environ(), "SBX_DATABASE_URL="+dbURL, "SBX_SIMFLEET_BASE="+c.FleetBase)
	s.control.Stderr = os.Stderr
	if err := s.control.Start(); err != nil {
		return fmt.Errorf("start control: %w", err)
	}
	s.cleanup = append(s.cleanup, func() { stopChild(s.control, 60*time.Second) })
	if err := waitListening(ctx, apiAddr, 2*time.Minute); err != nil {
		return fmt.Errorf("control: %w", err)
	}
	if s.tokens, err = seedScale(ctx, dbURL, filepath.Join(s.dir, "token"), c.Sandboxes, c.Accounts); err != nil {
		return err
	}
	s.token = s.tokens[0]

	// The broker's host key.
	hostKeys := filepath.Join(s.dir, "edge-keys")
	if err := os.MkdirAll(hostKeys, 0o700); err != nil {
		return err
	}
	_, priv, _ := ed25519.GenerateKey(rand.Reader)
	blk, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(hostKeys, "ssh_host_ed25519_key"), pem.EncodeToMemory(blk), 0o600); err != nil {
		return err
	}
	s.edge = exec.Command(filepath.Join(c.BinDir, "edge"),
		"--ssh-addr", sshAddr, "--http-addr", "", "--metrics-addr", edgeMetrics, "--control-url", "http://"+internalAddr,
		"--internal-secret-file", secretFile, "--host-key-dir", hostKeys, "--ca-key-file", filepath.Join(dataDir, "keys", "user_ca"),
		"--redis-url", redisURL, "--ssh-max-conns", "30000", "--preview-max-conns", "30000",
		"--preview-addr", previewAddr, "--preview-plain-http", "--preview-domain", scaleDomain,
		"--preview-public-port", strconv.Itoa(ports[3]),
		"--oidc-issuer", s.issuer, "--oidc-client-id", "loadtest", "--oidc-client-secret-file", oidcSecret,
		"--preview-session-key-file", keyFile, "--log-level", logLevel)
	s.edge.Stderr = os.Stderr
	if err := s.edge.Start(); err != nil {
		return fmt.Errorf("start edge: %w", err)
	}
	s.cleanup = append(s.cleanup, func() { stopChild(s.edge, 60*time.Second) })
	for _, a := range []string{sshAddr, previewAddr} {
		if err := waitListening(ctx, a, 2*time.Minute); err != nil {
			return fmt.Errorf("edge: %w", err)
		}
	}

	// The sandboxes' app: every simulated sandbox's forwarder reaches
	// these on this machine's loopback. Each runs in a child process:
	// the app holds one descriptor a WebSocket, and in this process
	// those would sit next to the clients' own one each, 20,000 at
	// 10,000 sockets, which a container's per-process limit refuses.
	for i := range s.appPorts {
		cmd, stdin, addr, err := startChild("scale app", scaleAppCmd)
		if err != nil {
			return err
		}
		s.apps[i] = cmd
		s.cleanup = append(s.cleanup, func() { stdin.Close(); stopChild(cmd, 10*time.Second) })
		_, port, err := net.SplitHostPort(addr)
		if err != nil {
			return fmt.Errorf("scale app address %q: %w", addr, err)
		}
		if s.appPorts[i], err = strconv.Atoi(port); err != nil {
			return fmt.Errorf("scale app address %q: %w", addr, err)
		}
	}
	return nil
}

const scaleAppCmd = "scale-app"

// runScaleApp is the sandboxes' app of the scale scenario, in its own
// process; closing stdin stops it.
func runScaleApp(ctx context.Context, _ []string) error {
	srv := &http.Server{Handler: upstreamHandler(), ReadHeaderTimeout: 10 * time.Second}
	return serveChild(ctx, srv.Serve, srv.Close, func(err error) bool { return errors.Is(err, http.ErrServerClosed) })
}

func addrOf(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// seedScale makes the dev account and accounts-1 more like it (each with
// room for every sandbox) and one agent token for each, in the database
// control has migrated.
func seedScale(ctx context.Context, dbURL, tokenFile string, sandboxes, accounts int) ([]string, error) {
	st, err := postgres.Open(ctx, dbURL, slog.New(slog.DiscardHandler))
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	defer st.Close()
	tok, _, err := devseed.Seed(ctx, st, "", tokenFile)
	if err != nil {
		return nil, fmt.Errorf("seed: %w", err)
	}
	toks := []string{tok}
	err = st.InTx(ctx, func(tx store.Tx) error {
		now := time.Now().UTC()
		for i := range accounts {
			id := devseed.AccountID
			if i > 0 {
				id = fmt.Sprintf("acct-scale-%d", i)
			}
			if err := tx.UpsertAccount(ctx, store.Account{ID: id, Name: id, SandboxesEnabled: true,
				ConcurrentLimit: 2*sandboxes + 100, CreatedAt: now}); err != nil {
				return err
			}
			if i == 0 {
				continue
			}
			secret, h := token.New(token.PrefixAgent)
			if err := tx.InsertToken(ctx, store.Token{ID: fmt.Sprintf("tok-scale-%d", i), AccountID: id, Kind: store.TokenAgent,
				Name: "loadtest scale", Hash: h, CreatedAt: now}); err != nil {
				return err
			}
			toks = append(toks, secret)
		}
		return nil
	})
	return toks, err
}
