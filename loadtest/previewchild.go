package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/edge/preview"
	"github.com/sbxedge/sbx/internal/podssh"
	"github.com/sbxedge/sbx/internal/podtcp"
	"github.com/sbxedge/sbx/internal/testkit/tcpproxy"
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
	SSHConns     int           `json:"ssh_conns"` // SSH connections to the sandbox; 0 or 1: one
	// Bare runs no proxy: a TCP relay that opens a connection to the
	// route's port for each connection, the transport the proxy rides
	// on: through the sandbox's forwarder when the route has one, else a
	// direct-tcpip channel.
	Bare bool `json:"bare"`
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
	ca := sshca.New(caSigner)
	pool := podssh.NewPool(ca, nil, podssh.WithKeyID("loadtest"), podssh.WithConnsPerSandbox(c.SSHConns))
	defer pool.Close()
	fwd := &podtcp.Dialer{CA: ca, KeyID: "loadtest"}
	if c.Bare {
		return forwardChild(ctx, pool, fwd, c.Route)
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	pcfg := preview.DefaultConfig()
	pcfg.Domain, pcfg.Scheme = "preview.localhost", "http"
	pcfg.Resolver = staticRoutes{c.Route}
	pcfg.Pods, pcfg.Forwarders = pool, fwd
	pcfg.Accounts = oneToken{tok: "sbx_at_loadtest", acct: c.Route.AccountID}
	pcfg.SessionKey = key
	pcfg.DevSignIn = &preview.DevSignIn{AccountID: c.Route.AccountID, User: "load"}
	pcfg.MaxIdleUpstreamPerHost = c.IdlePerHost
	pcfg.DisableLeanRelay = c.ReverseProxy
	px, err := preview.New(ctx, pcfg)
	if err != nil {
		return err
	}
	defer px.Close()
	srv := preview.NewServer(px, slog.New(slog.DiscardHandler), true)
	if d := os.Getenv(profileDirEnv); d != "" {
		stop, err := profileTo(d, strings.TrimSuffix(*file, ".json"))
		if err != nil {
			return err
		}
		defer stop()
	}
	return serveChild(ctx, srv.Serve, srv.Close, func(err error) bool {
		return errors.Is(err, net.ErrClosed) || err.Error() == "http: Server closed"
	})
}

// forwardChild relays each connection on a loopback port to rt's port
// in the sandbox, bytes only: through the sandbox's forwarder when rt
// has one, else over a direct-tcpip channel from pool. It prints the
// port's address as serveChild does.
func forwardChild(ctx context.Context, pool *podssh.Pool, fd *podtcp.Dialer, rt preview.Route) error {
	upstream := net.JoinHostPort("127.0.0.1", strconv.Itoa(rt.Port))
	fwd, err := tcpproxy.ListenVia(upstream, func() (net.Conn, error) {
		if rt.Target.ForwardAddr != "" {
			return fd.Dial(ctx, rt.Target, rt.Port)
		}
		c, err := pool.Client(ctx, rt.Target)
		if err != nil {
			return nil, fmt.Errorf("connect to sandbox %s: %w", rt.SandboxID, err)
		}
		return c.DialContext(ctx, "tcp", upstream)
	})
	if err != nil {
		return err
	}
	fmt.Println(fwd.Addr)
	waitParent(ctx)
	fwd.Stop()
	return nil
}

// profileDirEnv names a directory where each preview child writes a CPU
// profile of its whole life and an allocation profile at its end
// (<config>.cpu.pprof, <config>.allocs.pprof). An environment variable,
// not a flag, so that a child built from an older commit ignores it.
const profileDirEnv = "SBX_LOADTEST_PROFILE_DIR"

// profileTo starts the CPU profile; stop ends it and writes the
// allocation profile.
func profileTo(dir, name string) (stop func(), err error) {
	cpu, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		if f, err := os.Create(filepath.Join(dir, name+".allocs.pprof")); err == nil {
			_ = pprof.Lookup("allocs").WriteTo(f, 0)
			f.Close()
		}
	}, nil
}

// startPreviewChild runs `loadtest _preview-proxy` from bin (this binary
// when empty) with c written to dir, and returns its address, pid and a
// stop.
func startPreviewChild(bin, dir, name string, c previewChildConfig) (addr string, pid int, stop func(), err error) {
	file := "preview-" + name + ".json"
	b, _ := json.Marshal(c)
	if err := os.WriteFile(filepath.Join(dir, file), b, 0o600); err != nil {
		return "", 0, nil, err
	}
	args := []string{previewChildCmd, "--dir", dir, "--config", file}
	var cmd *exec.Cmd
	var stdin io.WriteCloser
	if bin == "" {
		cmd, stdin, addr, err = startChild("preview proxy", args...)
	} else {
		cmd, stdin, addr, err = startChildOf(bin, "preview proxy "+name, args...)
	}
	if err != nil {
		return "", 0, nil, err
	}
	return addr, cmd.Process.Pid, func() { stdin.Close(); _ = cmd.Wait() }, nil
}
