package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/devseed"
	"github.com/sbxedge/sbx/control/store/postgres"
)

// fleet is 2 control and 3 edge processes from the real binaries on
// loopback, with their own Redis and Postgres, as a small deployment runs
// them: the controls behind a balancer (a Kubernetes Service) for the
// edges' internal API calls and for API clients, the edges reached
// directly (a client picks one, as DNS round robin would hand it one).
//
// Sandboxes run on the local provider, which lives inside the control
// process that provisioned the sandbox (a pod outlives its control; a
// local sandbox does not). So that killing a control measures what the
// fleet does rather than that, the sandboxes the clients use are made
// while control A is stopped: they run in control B.
type fleet struct {
	dir            string
	controlBin     string
	edgeBin        string
	pg             *pgServer
	pgNote         string // why there is no private Postgres
	redis          *redisServer
	controls       []*controlProc
	edges          []*edgeProc
	apiLB, intLB   *balancer
	oidc           *http.Server
	token          string
	store          *postgres.Store
	internalSecret string
	// apiVia, when set, is the one replica API calls go to (setUp's);
	// only the scenario's own goroutine reads it (flows use apiLB).
	apiVia string
}

type controlProc struct {
	*proc
	api, internal string
	instance      string // its River client ID (--jobs-instance)
}

type edgeProc struct {
	*proc
	ssh, preview, health string
}

// previewDomain is the fleet's preview base domain; edges are reached
// by address, the Host header names the sandbox's port.
const previewDomain = "preview.localhost"

// startFleet builds the binaries (unless bins names a folder holding
// them) and starts everything under dir.
func startFleet(ctx context.Context, dir, bins string, privatePG bool) (*fleet, error) {
	f := &fleet{dir: dir}
	// The postgres OS user must reach its folder below this one.
	if err := os.Chmod(dir, 0o755); err != nil {
		return nil, err
	}
	if bins == "" {
		bins = filepath.Join(dir, "bin")
		var err error
		if f.controlBin, f.edgeBin, err = buildBinaries(ctx, bins); err != nil {
			return nil, err
		}
	} else {
		f.controlBin, f.edgeBin = filepath.Join(bins, "control"), filepath.Join(bins, "edge")
	}
	ok := false
	defer func() {
		if !ok {
			f.close()
		}
	}()
	var err error
	if f.pg, f.pgNote, err = startPostgres(ctx, dir, privatePG); err != nil {
		return nil, err
	}
	if f.redis, err = startRedis(ctx, dir); err != nil {
		return nil, err
	}
	if err := f.writeSecrets(); err != nil {
		return nil, err
	}
	if err := f.startOIDC(); err != nil {
		return nil, err
	}
	addrs, err := mustFreeAddrs(2*2 + 3*3)
	if err != nil {
		return nil, err
	}
	for i, name := range []string{"a", "b"} {
		f.controls = append(f.controls, &controlProc{api: addrs[2*i], internal: addrs[2*i+1], instance: "control-" + name})
	}
	for i := range 3 {
		a := addrs[4+3*i:]
		f.edges = append(f.edges, &edgeProc{ssh: a[0], preview: a[1], health: a[2]})
	}
	if f.apiLB, err = newBalancer(f.controls[0].api, f.controls[1].api); err != nil {
		return nil, err
	}
	if f.intLB, err = newBalancer(f.controls[0].internal, f.controls[1].internal); err != nil {
		return nil, err
	}
	for i, c := range f.controls {
		c.proc = f.controlCmd(c, i)
		if err := c.start(); err != nil {
			return nil, err
		}
		// One at a time: the first migrates the database.
		if err := c.waitTCP(ctx, c.api, 60*time.Second); err != nil {
			return nil, err
		}
	}
	if f.store, err = postgres.Open(ctx, f.pg.url, slog.New(slog.DiscardHandler)); err != nil {
		return nil, err
	}
	if f.token, _, err = devseed.Seed(ctx, f.store, "", filepath.Join(dir, "token")); err != nil {
		return nil, err
	}
	for i, e := range f.edges {
		e.proc = f.edgeCmd(e, i)
		if err := e.start(); err != nil {
			return nil, err
		}
		if err := e.waitTCP(ctx, e.ssh, 30*time.Second); err != nil {
			return nil, err
		}
		if err := e.waitTCP(ctx, e.preview, 30*time.Second); err != nil {
			return nil, err
		}
	}
	ok = true
	return f, nil
}

// writeSecrets writes what every replica shares: the internal API
// secret, the user CA and host-key secret (a mounted Secret in a
// cluster, copied into each control's folder here), the edges' host keys
// folder and the preview session key.
func (f *fleet) writeSecrets() error {
	f.internalSecret = randHex(32)
	files := map[string]string{
		"internal-secret": f.internalSecret,
		"session.key":     randHex(32),
		"oidc-secret":     "fleet-oidc-secret",
	}
	for name, v := range files {
		if err := os.WriteFile(filepath.Join(f.dir, name), []byte(v), 0o600); err != nil {
			return err
		}
	}
	shared := filepath.Join(f.dir, "keys")
	if _, err := sshca.LoadOrCreate(filepath.Join(shared, "user_ca")); err != nil {
		return err
	}
	if _, err := hostkey.LoadOrCreate(filepath.Join(shared, "host_key_secret")); err != nil {
		return err
	}
	entries, err := os.ReadDir(shared)
	if err != nil {
		return err
	}
	for _, name := range []string{"control-a", "control-b"} {
		dst := filepath.Join(f.dir, name, "keys")
		if err := os.MkdirAll(dst, 0o700); err != nil {
			return err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(shared, e.Name()))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o600); err != nil {
				return err
			}
		}
	}
	return os.MkdirAll(filepath.Join(f.dir, "edge-hostkeys"), 0o700)
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// startOIDC serves the discovery document the edges' preview proxies
// read at start; nobody signs in (clients use the account's token).
func (f *fleet) startOIDC() error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	iss := "http://" + ln.Addr().String()
	mux := http.NewServeMux()
	mux.HandleFunc("/.well-known/openid-configuration", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"issuer": iss, "authorization_endpoint": iss + "/auth",
			"token_endpoint": iss + "/token", "jwks_uri": iss + "/jwks", "id_token_signing_alg_values_supported": []string{"RS256"}})
	})
	mux.HandleFunc("/jwks", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, `{"keys":[]}`) })
	f.oidc = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, Addr: iss}
	go func() { _ = f.oidc.Serve(ln) }() // ends at close
	return nil
}

func (f *fleet) controlCmd(c *controlProc, i int) *proc {
	name := c.instance
	return &proc{name: name, bin: f.controlBin, log: filepath.Join(f.dir, name+".log"), args: []string{
		"--data-dir", filepath.Join(f.dir, name),
		"--api-addr", c.api, "--internal-addr", c.internal, "--metrics-addr", "",
		"--internal-secret-file", filepath.Join(f.dir, "internal-secret"),
		"--ssh-public-addr", f.edges[0].ssh,
		"--redis-url", f.redis.url(), "--jobs-instance", name,
		"--preview-domain", previewDomain, "--provider", "local",
		// A local sandbox lives in one control's process: another
		// replica's reconcile would take it for a vanished pod. Once
		// at start (before any sandbox exists) is all this fleet runs.
		"--reconcile-interval", "24h",
		"--log-level", "warn",
	}, env: []string{"SBX_DATABASE_URL=" + f.pg.url}}
}

func (f *fleet) edgeCmd(e *edgeProc, i int) *proc {
	return &proc{name: fmt.Sprintf("edge-%d", i+1), bin: f.edgeBin, log: filepath.Join(f.dir, fmt.Sprintf("edge-%d.log", i+1)), args: []string{
		"--ssh-addr", e.ssh, "--http-addr", e.health, "--metrics-addr", "",
		"--control-url", "http://" + f.intLB.addr(),
		"--internal-secret-file", filepath.Join(f.dir, "internal-secret"),
		"--host-key-dir", filepath.Join(f.dir, "edge-hostkeys"),
		"--ca-key-file", filepath.Join(f.dir, "keys", "user_ca"),
		"--redis-url", f.redis.url(), "--ssh-drain", "1s",
		"--preview-addr", e.preview, "--preview-plain-http", "--preview-domain", previewDomain,
		"--oidc-issuer", f.oidc.Addr, "--oidc-client-id", "fleet",
		"--oidc-client-secret-file", filepath.Join(f.dir, "oidc-secret"),
		"--preview-session-key-file", filepath.Join(f.dir, "session.key"),
		"--log-level", "warn",
	}}
}

// printAddrs writes every process's address to w.
func (f *fleet) printAddrs(w io.Writer) {
	fmt.Fprintf(w, "fleet under %s\n", f.dir)
	if f.pg.private != nil {
		fmt.Fprintf(w, "  postgres   %s (private cluster, pid %d)\n", strings.TrimPrefix(f.pg.admin, "postgres://"), f.pg.private.pid())
	} else {
		fmt.Fprintf(w, "  postgres   shared 127.0.0.1:5432 database %s (no private cluster: %s)\n", f.pg.dbName, f.pgNote)
	}
	fmt.Fprintf(w, "  redis      %s (private, pid %d)\n", f.redis.addr, f.redis.pid())
	for _, c := range f.controls {
		fmt.Fprintf(w, "  %-10s api %s internal %s (pid %d)\n", c.instance, c.api, c.internal, c.pid())
	}
	fmt.Fprintf(w, "  api LB     %s   internal LB %s\n", f.apiLB.addr(), f.intLB.addr())
	for _, e := range f.edges {
		fmt.Fprintf(w, "  %-10s ssh %s preview %s health %s (pid %d)\n", e.name, e.ssh, e.preview, e.health, e.pid())
	}
}

// close stops everything it started, in reverse order.
func (f *fleet) close() {
	for _, e := range f.edges {
		if e.proc != nil {
			e.kill(true)
		}
	}
	for _, c := range f.controls {
		if c.proc != nil {
			c.kill(true)
		}
	}
	if f.store != nil {
		f.store.Close()
	}
	for _, b := range []*balancer{f.apiLB, f.intLB} {
		if b != nil {
			b.close()
		}
	}
	if f.oidc != nil {
		_ = f.oidc.Close()
	}
	if f.redis != nil {
		f.redis.kill(false)
	}
	if f.pg != nil {
		f.pg.close()
	}
}
