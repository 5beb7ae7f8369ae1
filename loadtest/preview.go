package main

import (
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/testkit/wstest"
)

// previewConfig bounds the preview scenarios.
type previewConfig struct {
	Duration  time.Duration // per small-request run
	Conns     intList       // concurrent connections for small requests, one run per count
	Download  int64         // bytes of the large download
	WSRounds  int           // WebSocket echo round trips
	Server    string        // sandbox SSH server: sshd or embedded
	NoNginx   bool          // skip the nginx column
	NoCaddy   bool          // skip the Caddy column
	NoBare    bool          // skip the bare transport columns (ssh-tcpip, fwd-tcp)
	SSHRoad   bool          // the proxy takes the SSH road, as before the port forwarder: no fwd-tcp or proxy-ssh column
	RProxy    bool          // also run the proxy with every request through httputil.ReverseProxy
	IdleConns int           // idle upstream connections each proxy keeps (nginx, Caddy, ours alike)
	Rounds    int           // rounds of every scenario; cells are medians
	Scenarios string
	Before    string // a loadtest binary from another commit: its proxy runs as column proxy-before
	SSHConns  int    // SSH connections from the proxy to the sandbox
}

func (c *previewConfig) Validate() error {
	switch {
	case c.Duration <= 0 || c.Duration > 2*time.Minute:
		return errors.New("--duration must be in (0, 2m]")
	case len(c.Conns) == 0 || slices.Min(c.Conns) < 1 || slices.Max(c.Conns) > 1024:
		return errors.New("--conns must be counts in 1..1024")
	case c.Download < 1<<20 || c.Download > 8<<30:
		return errors.New("--download must be 1 MiB..8 GiB")
	case c.WSRounds < 1 || c.WSRounds > 1_000_000:
		return errors.New("--ws-rounds must be 1..1000000")
	case c.Server != "sshd" && c.Server != "embedded":
		return errors.New("--server must be sshd or embedded")
	case c.Rounds < 1 || c.Rounds > 20:
		return errors.New("--rounds must be 1..20")
	case c.SSHConns < 1 || c.SSHConns > 16:
		return errors.New("--ssh-conns must be 1..16")
	case c.IdleConns < 1 || c.IdleConns > 4096:
		return errors.New("--idle-conns must be 1..4096")
	}
	return nil
}

// runPreview measures the preview proxy against the same upstream reached
// directly and through Debian's nginx as a plain reverse proxy, in one
// run. The upstream is a Go server on loopback standing in for the
// sandbox's dev server; the proxy reaches it as the product does, through
// the sandbox's port forwarder (plain TCP, podtcp), in a process of its
// own as it would be in the sandbox's init. Column proxy-ssh is the same
// proxy on the SSH road (a direct-tcpip channel on a pooled SSH
// connection to the sandbox's sshd). The bare columns are each road's
// transport alone, the floor for the proxy on it.
func runPreview(ctx context.Context, args []string) error {
	var c previewConfig
	fs := flag.NewFlagSet("loadtest preview", flag.ContinueOnError)
	fs.DurationVar(&c.Duration, "duration", 5*time.Second, "length of each small-request run")
	c.Conns = intList{64}
	fs.Var(&c.Conns, "conns", "concurrent connections for small requests; a comma-separated list runs each count and, for two or more, the p99 growth from the first to the last (e.g. 64,1024)")
	fs.Int64Var(&c.Download, "download", 1<<30, "bytes of the large download")
	fs.IntVar(&c.WSRounds, "ws-rounds", 5000, "WebSocket echo round trips")
	fs.StringVar(&c.Server, "server", "sshd", "sandbox SSH server: sshd or embedded")
	fs.BoolVar(&c.NoNginx, "no-nginx", false, "skip the nginx column")
	fs.BoolVar(&c.NoCaddy, "no-caddy", false, "skip the Caddy column")
	fs.BoolVar(&c.NoBare, "no-bare", false, "skip the "+bareColumn+" and "+bareFwdColumn+" columns: a bare TCP relay over each of the proxy's transports, no HTTP")
	fs.BoolVar(&c.SSHRoad, "ssh-road", false, "run the proxy on the SSH road only (direct-tcpip), as before the sandbox's port forwarder")
	fs.BoolVar(&c.RProxy, "reverseproxy", true, "add a column for the proxy with every request through httputil.ReverseProxy (its DisableLeanRelay)")
	fs.IntVar(&c.Rounds, "rounds", 3, "rounds of every scenario (cells are medians with ranges)")
	fs.IntVar(&c.IdleConns, "idle-conns", 128, "idle upstream connections kept by every proxy (nginx keepalive, Caddy keepalive_idle_conns_per_host, MaxIdleUpstreamPerHost)")
	fs.StringVar(&c.Scenarios, "scenarios", "small,download,ws", "comma-separated subset")
	fs.IntVar(&c.SSHConns, "ssh-conns", 1, "SSH connections from the proxy (this commit's) to the sandbox, as the edge's preview pool keeps")
	fs.StringVar(&c.Before, "before", "", "a loadtest binary built from another commit (e.g. main): its proxy runs beside this one as proxy-before, in the same run")
	if err := parseConfig(fs, args, &c); err != nil {
		return err
	}
	env, err := setupPreview(ctx, c)
	if err != nil {
		return err
	}
	defer env.close()
	fmt.Printf("sandbox server: %s; %s conns, %s per run; %d idle upstream connections per proxy; %d SSH connections to the sandbox\n", c.Server, c.Conns.String(), c.Duration, c.IdleConns, c.SSHConns)
	for _, p := range env.paths {
		fmt.Printf("  %-9s %s\n", p.name, p.addr)
	}
	fmt.Println()
	// Ratios of the proxy to each other column present.
	var ratioTo []int
	proxy := len(env.paths) - 1
	for i, p := range env.paths[:proxy] {
		if p.name != "direct" {
			ratioTo = append(ratioTo, i)
		}
	}
	fmt.Printf("each cell: median [min-max] of %d rounds; each round runs every column once, in a rotated order;\n", c.Rounds)
	fmt.Printf("ratios: median [min-max] of the per-round ratios\n\n")
	fmt.Printf("%-30s %-6s", "scenario", "unit")
	for _, p := range env.paths {
		fmt.Printf(" %22s", p.name)
	}
	// A ratio column is as wide as its name or a cell, "0.95 [0.80-1.10]".
	width := func(i int) int { return max(16, len("proxy/"+env.paths[i].name)) }
	for _, i := range ratioTo {
		fmt.Printf(" %*s", width(i), "proxy/"+env.paths[i].name)
	}
	fmt.Println()
	// line prints one metric: vals[path][round], negative for n/a.
	line := func(name, unit string, vals [][]float64) {
		fmt.Printf("%-30s %-6s", name, unit)
		for _, v := range vals {
			if v[0] < 0 {
				fmt.Printf(" %22s", "-")
				continue
			}
			lo, hi := slices.Min(v), slices.Max(v)
			fmt.Printf(" %22s", fmt.Sprintf("%.1f [%.1f-%.1f]", median(v), lo, hi))
		}
		for _, i := range ratioTo {
			var ratios []float64
			for r := range vals[proxy] {
				if vals[proxy][r] >= 0 && vals[i][r] > 0 {
					ratios = append(ratios, vals[proxy][r]/vals[i][r])
				}
			}
			if len(ratios) == 0 {
				fmt.Printf(" %*s", width(i), "-")
				continue
			}
			fmt.Printf(" %*s", width(i), fmt.Sprintf("%.2f [%.2f-%.2f]", median(ratios), slices.Min(ratios), slices.Max(ratios)))
		}
		fmt.Println()
	}
	want := func(s string) bool { return slices.Contains(strings.Split(c.Scenarios, ","), s) }
	if want("small") {
		var p99s [][][]float64 // [count][path][round]
		for _, n := range c.Conns {
			v, err := env.rounds(c.Rounds, 6, func(p path) ([]float64, error) {
				r, err := smallRequests(ctx, p, c, n)
				return []float64{r.rps, r.p50, r.p99, r.cpuPerReq, r.sandboxPerReq, r.firstP99}, err
			})
			if err != nil {
				return fmt.Errorf("small requests, %d conns: %w", n, err)
			}
			line(fmt.Sprintf("1 KiB GET, %d conns", n), "req/s", v[0])
			line("  latency p50", "µs", v[1])
			line("  latency p99", "µs", v[2])
			line("  tier CPU per request", "µs", v[3])
			line("    of which sandbox side", "µs", v[4])
			line("  first request p99 (connect)", "µs", v[5])
			p99s = append(p99s, v[2])
		}
		if len(p99s) > 1 {
			// The target compares growths, not latencies: the
			// proxy's p99 may grow no faster than nginx's (ratio of the
			// growths ≤ 1.5), round by round.
			first, last := p99s[0], p99s[len(p99s)-1]
			growth := make([][]float64, len(first))
			for i := range first {
				growth[i] = make([]float64, c.Rounds)
				for r := range c.Rounds {
					growth[i][r] = -1
					if first[i][r] > 0 && last[i][r] >= 0 {
						growth[i][r] = last[i][r] / first[i][r]
					}
				}
			}
			line(fmt.Sprintf("p99 growth %d→%d conns", c.Conns[0], c.Conns[len(c.Conns)-1]), "×", growth)
		}
	}
	if want("download") {
		v, err := env.rounds(c.Rounds, 1, func(p path) ([]float64, error) {
			r, err := download(ctx, p, c.Download)
			return []float64{r}, err
		})
		if err != nil {
			return fmt.Errorf("download: %w", err)
		}
		line(fmt.Sprintf("one %d MiB download", c.Download>>20), "MiB/s", v[0])
	}
	if want("ws") {
		v, err := env.rounds(c.Rounds, 2, func(p path) ([]float64, error) {
			a, b, err := wsEcho(ctx, p, c.WSRounds)
			return []float64{a, b}, err
		})
		if err != nil {
			return fmt.Errorf("websocket: %w", err)
		}
		line("WebSocket echo RTT p50", "µs", v[0])
		line("WebSocket echo RTT p99", "µs", v[1])
	}
	return nil
}

// rounds runs f on every path n times, each round in a rotated order so
// that a change in the machine's load falls on every column alike. It
// returns vals[metric][path][round] for the metrics metrics f returns.
func (e *previewEnv) rounds(n, metrics int, f func(path) ([]float64, error)) ([][][]float64, error) {
	vals := make([][][]float64, metrics)
	for m := range vals {
		vals[m] = make([][]float64, len(e.paths))
		for p := range vals[m] {
			vals[m][p] = make([]float64, n)
		}
	}
	for r := range n {
		for k := range e.paths {
			i := (k + r) % len(e.paths)
			got, err := f(e.paths[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", e.paths[i].name, err)
			}
			for m := range metrics {
				vals[m][i][r] = got[m]
			}
		}
	}
	return vals, nil
}

// median is the middle value (the mean of the two middle ones for an
// even count), for figures and for durations alike.
func median[T ~int64 | ~float64](v []T) T {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// path is one way to the upstream: its listener and the Host to send.
// tier lists the processes that make up its proxy tier (for the proxy,
// the sandbox's sshd too); nil for direct.
type path struct {
	name, addr, host string
	header           http.Header
	tier             func() []int
	sandbox          func() []int // the sandbox side of tier (sshd), nil if none
}

// bareColumn is the path through a TCP forwarder that opens a
// direct-tcpip channel per connection on a pool like the proxy's (as many
// SSH connections, --ssh-conns): the transport the proxy rides on, without
// HTTP or auth. It is sent the proxy's requests (the upstream ignores Host
// and Authorization), so proxy/ssh-tcpip is the proxy's cost over its
// transport.
const bareColumn = "ssh-tcpip"

// bareFwdColumn is the same through the sandbox's port forwarder: the
// transport the proxy rides on by default.
const bareFwdColumn = "fwd-tcp"

// tierCPU is the CPU time the live processes of p's tier have used.
func (p path) tierCPU() time.Duration { return cpuOf(p.tier) }

// cpuOf is the CPU time the live processes pids lists have used.
func cpuOf(pids func() []int) time.Duration {
	var sum time.Duration
	for _, pid := range pidsOf(pids) {
		if v, err := procCPU(pid, false); err == nil {
			sum += v
		}
	}
	return sum
}

// pidsOf is what pids lists, none when pids is nil.
func pidsOf(pids func() []int) []int {
	if pids == nil {
		return nil
	}
	return pids()
}

type previewEnv struct {
	paths   []path
	dir     string
	prov    *local.Local
	cleanup []func()
}

func (e *previewEnv) close() {
	for i := len(e.cleanup) - 1; i >= 0; i-- {
		e.cleanup[i]()
	}
	if e.prov != nil {
		_ = e.prov.Destroy(context.Background(), "sbx-loadtest-preview")
		_ = e.prov.Close()
	}
	os.RemoveAll(e.dir)
}

func upstreamHandler() http.Handler {
	kib := make([]byte, 1024)
	_, _ = rand.Read(kib)
	mux := http.NewServeMux()
	mux.HandleFunc("/1k", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(kib) })
	mux.HandleFunc("/big", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		buf := make([]byte, 256<<10)
		for n > 0 {
			k := min(n, int64(len(buf)))
			if _, err := w.Write(buf[:k]); err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("/ws", wstest.EchoSocket(""))
	return mux
}

type staticRoutes struct{ rt preview.Route }

func (s staticRoutes) Resolve(context.Context, string) (preview.Route, error) { return s.rt, nil }

type oneToken struct{ tok, acct string }

func (o oneToken) TokenAccount(_ context.Context, secret string) (string, error) {
	if secret == o.tok {
		return o.acct, nil
	}
	return "", preview.ErrInvalidToken
}
func (oneToken) Member(context.Context, preview.Identity, string) (bool, error) { return false, nil }

func setupPreview(ctx context.Context, c previewConfig) (_ *previewEnv, err error) {
	dir, err := os.MkdirTemp("", "sbx-loadtest-preview-")
	if err != nil {
		return nil, err
	}
	e := &previewEnv{dir: dir}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	// The dev server.
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	up := &http.Server{Handler: upstreamHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = up.Serve(upLn) }()
	e.cleanup = append(e.cleanup, func() { _ = up.Close() })
	upPort := upLn.Addr().(*net.TCPAddr).Port
	e.paths = append(e.paths, path{name: "direct", addr: upLn.Addr().String(), host: upLn.Addr().String()})

	if !c.NoNginx {
		if err := e.add(startNginx(dir, upLn.Addr().String(), c.IdleConns)); err != nil {
			return nil, err
		}
	}

	if !c.NoCaddy {
		if err := e.add(startCaddy(dir, upLn.Addr().String(), c.IdleConns)); err != nil {
			return nil, err
		}
	}

	// The sandbox, and the proxy in front of it in its own process.
	ca, caPEM, err := sshca.Generate()
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca_key"), caPEM, 0o600); err != nil {
		return nil, err
	}
	hostPEM, hostSigner, err := sshca.GenerateKey()
	if err != nil {
		return nil, err
	}
	e.prov, err = local.New(local.Config{DataDir: filepath.Join(dir, "sandboxes"), Mode: c.Server, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	ep, err := e.prov.Provision(ctx, provider.Spec{SandboxID: "sbx-loadtest-preview", AccountID: "acct-load", Profile: "load",
		Platform: "linux", HostKeyPEM: hostPEM, UserCAKey: ca.AuthorizedKey()})
	if err != nil {
		return nil, fmt.Errorf("start sandbox: %w", err)
	}
	// The sandbox side of the proxy's tier: sshd and its per-connection
	// processes (the embedded server runs in this process: not counted).
	var sandbox func() []int
	if c.Server == "sshd" {
		sshdPID, err := findProcess("sshd", filepath.Join(dir, "sandboxes"))
		if err != nil {
			return nil, err
		}
		sandbox = func() []int { return descendants(sshdPID) }
	}
	hostKey := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(hostSigner.PublicKey())))
	sshRoute := preview.Route{SandboxID: "sbx-loadtest-preview", AccountID: "acct-load", Port: upPort, Ready: true,
		Target: podssh.Target{SandboxID: "sbx-loadtest-preview", Addr: ep.Addr, User: ep.User, HostKey: hostKey}}
	fwdRoute, fwdSide := sshRoute, sandbox
	if !c.SSHRoad {
		// The forwarder in a process of its own, as the sandbox's init
		// is: its CPU is the sandbox side of the tier on this road.
		addr, pid, stop, err := startForwarderChild(dir, forwarderChildConfig{HostKeyPEM: string(hostPEM), Principal: ep.User})
		if err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, stop)
		fwdRoute.Target.ForwardAddr = addr
		fwdSide = func() []int { return []int{pid} }
	}
	type column struct {
		name  string
		route preview.Route
		side  func() []int
	}
	var proxies []column
	if !c.NoBare {
		proxies = append(proxies, column{bareColumn, sshRoute, sandbox})
		if !c.SSHRoad {
			proxies = append(proxies, column{bareFwdColumn, fwdRoute, fwdSide})
		}
	}
	if c.RProxy {
		proxies = append(proxies, column{"proxy-rp", fwdRoute, fwdSide})
	}
	if c.Before != "" {
		// A binary from before the forwarder takes the SSH road.
		proxies = append(proxies, column{"proxy-before", sshRoute, sandbox})
	}
	if !c.SSHRoad {
		proxies = append(proxies, column{"proxy-ssh", sshRoute, sandbox})
	}
	proxies = append(proxies, column{"proxy", fwdRoute, fwdSide})
	for _, col := range proxies {
		bin, conns := "", c.SSHConns
		if col.name == "proxy-before" {
			// One SSH connection, as before WithConnsPerSandbox (a binary
			// from then ignores it): --before with this binary compares
			// --ssh-conns with one.
			bin, conns = c.Before, 1
		}
		addr, pid, stop, err := startPreviewChild(bin, dir, col.name, previewChildConfig{Route: col.route, ReverseProxy: col.name == "proxy-rp",
			IdlePerHost: c.IdleConns, SSHConns: conns, Bare: col.name == bareColumn || col.name == bareFwdColumn})
		if err != nil {
			return nil, err
		}
		e.cleanup = append(e.cleanup, stop)
		_, port, _ := net.SplitHostPort(addr)
		side := col.side
		e.paths = append(e.paths, path{name: col.name, addr: addr,
			host:    "loadtest.preview.localhost:" + port,
			header:  http.Header{"Authorization": {"Bearer sbx_at_loadtest"}},
			tier:    func() []int { return append(descendants(pid), pidsOf(side)...) },
			sandbox: side})
	}
	return e, nil
}

// add adds a started path and its stop, or returns the error it failed
// to start with.
func (e *previewEnv) add(p path, stop func(), err error) error {
	if err != nil {
		return err
	}
	e.cleanup = append(e.cleanup, stop)
	e.paths = append(e.paths, p)
	return nil
}

// startCaddy runs Debian's caddy as a plain reverse proxy to upstream,
// keeping idle upstream connections as nginx and the proxy do.
func startCaddy(dir, upstream string, idle int) (path, func(), error) {
	bin, err := exec.LookPath("caddy")
	if err != nil {
		return path{}, nil, errors.New("caddy not found (apt-get install caddy, or --no-caddy)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return path{}, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	_, port, _ := net.SplitHostPort(addr)
	conf := fmt.Sprintf(`{
	admin off
	auto_https off
	log default {
		output discard
	}
}
http://:%[1]s {
	bind 127.0.0.1
	reverse_proxy %[2]s {
		flush_interval -1
		transport http {
			keepalive 90s
			keepalive_idle_conns %[3]d
			keepalive_idle_conns_per_host %[3]d
		}
	}
}
`, port, upstream, idle)
	confPath := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return path{}, nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		return path{}, nil, err
	}
	cmd := exec.Command(bin, "run", "--config", confPath, "--adapter", "caddyfile")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	if err := cmd.Start(); err != nil {
		logf.Close()
		return path{}, nil, fmt.Errorf("start caddy: %w", err)
	}
	stop := func() { terminate(cmd); logf.Close() }
	if !listening(addr) {
		stop()
		b, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
		return path{}, nil, fmt.Errorf("caddy did not listen within 5s: %s", b)
	}
	pid := cmd.Process.Pid
	return path{name: "caddy", addr: addr, host: addr, tier: func() []int { return descendants(pid) }}, stop, nil
}

// startNginx runs Debian's nginx as a plain keep-alive reverse proxy to
// upstream, WebSocket upgrades included.
func startNginx(dir, upstream string, idle int) (path, func(), error) {
	bin, err := exec.LookPath("nginx")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/nginx"); serr != nil {
			return path{}, nil, errors.New("nginx not found (apt-get install nginx, or --no-nginx)")
		}
		bin = "/usr/sbin/nginx"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return path{}, nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	conf := fmt.Sprintf(`daemon off;
worker_processes 2;
pid %[1]s/nginx.pid;
error_log %[1]s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %[1]s/body; proxy_temp_path %[1]s/proxy;
  fastcgi_temp_path %[1]s/fcgi; uwsgi_temp_path %[1]s/uwsgi; scgi_temp_path %[1]s/scgi;
  upstream app { server %[2]s; keepalive %[4]d; keepalive_timeout 90s; }
  map $http_upgrade $connection_upgrade { default upgrade; '' ''; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Upgrade $http_upgrade;
      proxy_set_header Connection $connection_upgrade;
      proxy_buffering off;
    }
  }
}
`, dir, upstream, addr, idle)
	confPath := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o600); err != nil {
		return path{}, nil, err
	}
	cmd := exec.Command(bin, "-c", confPath, "-p", dir)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return path{}, nil, fmt.Errorf("start nginx: %w", err)
	}
	stop := func() { terminate(cmd) }
	if !listening(addr) {
		stop()
		return path{}, nil, errors.New("nginx did not listen within 5s")
	}
	pid := cmd.Process.Pid
	return path{name: "nginx", addr: addr, host: addr, tier: func() []int { return descendants(pid) }}, stop, nil
}

// terminate stops cmd with SIGTERM (so a master process stops its
// workers; SIGKILL would orphan them), and kills it if it has not exited
// within 5 s.
func terminate(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// listening waits about 5 s for something to accept on addr.
func listening(addr string) bool {
	for i := 0; ; i++ {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return true
		}
		if i > 100 {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func clientFor(p path, conns int) *http.Client {
	d := &net.Dialer{}
	return &http.Client{Transport: &http.Transport{
		DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return d.DialContext(ctx, "tcp", p.addr) },
		MaxIdleConnsPerHost: conns, MaxConnsPerHost: conns, DisableCompression: true,
	}}
}

func request(ctx context.Context, p path, target string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.host+target, nil)
	if err != nil {
		return nil, err
	}
	for k, v := range p.header {
		req.Header[k] = v
	}
	return req, nil
}

// smallResult: cpuPerReq is the tier's CPU µs per request, -1 for direct.
// sandboxPerReq is the part of it spent in the sandbox's sshd, -1 if none.
// firstP99 is the p99 of every connection's first request (its connect,
// and for a proxy its upstream's), which the other figures leave out.
type smallResult struct{ rps, p50, p99, cpuPerReq, sandboxPerReq, firstP99 float64 }

// smallRequests holds conns keep-alive connections to p, each sending
// 1 KiB GETs one after another for c.Duration. Every connection's first
// request is made before the clock starts and is counted apart: the
// figures are those of connections that are open, as wrk's are, not of a
// storm of conns connects at once (at 1,024 that storm, not the relay, set
// the p99, and it moved by seconds from run to run).
func smallRequests(ctx context.Context, p path, c previewConfig, conns int) (smallResult, error) {
	cl := clientFor(p, conns)
	defer cl.CloseIdleConnections()
	var mu sync.Mutex
	var lat, firsts []time.Duration
	var firstErr error
	fail := func(err error) {
		mu.Lock()
		firstErr = cmpErr(firstErr, err)
		mu.Unlock()
	}
	get := func(ctx context.Context) (time.Duration, error) {
		req, _ := request(ctx, p, "/1k")
		t0 := time.Now()
		resp, err := cl.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode != 200 {
				err = fmt.Errorf("status %d", resp.StatusCode)
			}
		}
		return time.Since(t0), err
	}
	warmCtx, warmCancel := context.WithTimeout(ctx, time.Minute)
	defer warmCancel()
	// runCtx is set before begin is closed, and read after.
	var runCtx context.Context
	begin := make(chan struct{})
	var warm, wg sync.WaitGroup
	for range conns {
		warm.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := get(warmCtx)
			warm.Done()
			if err != nil {
				fail(fmt.Errorf("first request: %w", err))
				return
			}
			<-begin
			var mine []time.Duration
			for runCtx.Err() == nil {
				d, err := get(runCtx)
				if err != nil {
					if runCtx.Err() == nil {
						fail(err)
					}
					break
				}
				mine = append(mine, d)
			}
			mu.Lock()
			lat = append(lat, mine...)
			firsts = append(firsts, d)
			mu.Unlock()
		}()
	}
	warm.Wait()
	var cancel context.CancelFunc
	runCtx, cancel = context.WithTimeout(ctx, c.Duration)
	defer cancel()
	mu.Lock()
	if firstErr != nil {
		cancel() // no run: the error is reported as it is
	}
	mu.Unlock()
	cpu0, sbx0 := p.tierCPU(), cpuOf(p.sandbox)
	start := time.Now()
	close(begin)
	wg.Wait()
	elapsed := time.Since(start)
	cpu, sbx := p.tierCPU()-cpu0, cpuOf(p.sandbox)-sbx0
	if firstErr != nil {
		return smallResult{}, firstErr
	}
	if len(lat) == 0 {
		return smallResult{}, errors.New("no request completed")
	}
	us := func(l []time.Duration, q float64) float64 { return float64(l[int(q*float64(len(l)-1))].Microseconds()) }
	slices.Sort(lat)
	slices.Sort(firsts)
	r := smallResult{rps: float64(len(lat)) / elapsed.Seconds(), p50: us(lat, 0.50), p99: us(lat, 0.99), cpuPerReq: -1, sandboxPerReq: -1, firstP99: us(firsts, 0.99)}
	if p.tier != nil {
		r.cpuPerReq = float64(cpu.Microseconds()) / float64(len(lat))
	}
	if p.sandbox != nil {
		r.sandboxPerReq = float64(sbx.Microseconds()) / float64(len(lat))
	}
	return r, nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func download(ctx context.Context, p path, n int64) (float64, error) {
	cl := clientFor(p, 1)
	defer cl.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := request(ctx, p, "/big?n="+strconv.FormatInt(n, 10))
	if err != nil {
		return 0, err
	}
	start := time.Now()
	resp, err := cl.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	got, err := io.Copy(io.Discard, resp.Body)
	if err != nil || got != n {
		return 0, fmt.Errorf("read %d of %d bytes: %v", got, n, err)
	}
	return float64(n) / (1 << 20) / time.Since(start).Seconds(), nil
}

func wsEcho(ctx context.Context, p path, rounds int) (p50, p99 float64, err error) {
	cl := clientFor(p, 1)
	defer cl.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+p.host+"/ws", &websocket.DialOptions{HTTPClient: cl, HTTPHeader: p.header})
	if err != nil {
		return 0, 0, err
	}
	defer c.CloseNow()
	msg := []byte("keystroke")
	lat := make([]time.Duration, 0, rounds)
	for range rounds {
		t0 := time.Now()
		if err := c.Write(ctx, websocket.MessageText, msg); err != nil {
			return 0, 0, err
		}
		if _, _, err := c.Read(ctx); err != nil {
			return 0, 0, err
		}
		lat = append(lat, time.Since(t0))
	}
	c.Close(websocket.StatusNormalClosure, "")
	slices.Sort(lat)
	us := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))].Microseconds()) }
	return us(0.5), us(0.99), nil
}
