// Package simfleet is a provider whose sandboxes are cheap SSH endpoints
// inside the control process, so one machine holds a fleet of 10,000
// for load tests (go run ./loadtest scale). It is never offered to
// users: cmd/control selects it only with the internal
// --provider internal-simfleet, which its help does not list.
//
// A sandbox is what the edge reaches, and nothing more: an SSH server
// presenting the sandbox's own host key and accepting only the CA's user
// certificates for its principal (the same check as a real sandbox's
// sshd), whose sessions echo (a shell or "cat" copies stdin back, "echo
// a b" prints its arguments, anything else exits 0), and a podtcp
// forwarder with the sandbox's keys, which reaches ports on this
// machine's loopback: a test's one HTTP server stands for every
// sandbox's app. There is no shell, no workspace and no init, so
// services, files and suspend do not exist here.
//
// Each sandbox listens on its own loopback address (127.A.B.C, Linux
// routes all of 127/8 to lo) at two fixed ports: an SSH server picks its
// host key before the client says whom it wants, so one listener cannot
// serve many sandboxes, and fixed ports outside the ephemeral range keep
// 20,000 listeners from taking the ports the edge's own connections
// need.
package simfleet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/internal/podtcp"
)

// Config places the fleet.
type Config struct {
	// Base is the first sandbox's loopback address; later ones count up
	// from it, skipping .0 and .255. Default 127.90.0.1.
	Base netip.Addr
	// SSHPort and ForwardPort are every sandbox's two ports. Defaults
	// 22022 and 22023 (below Linux's ephemeral range).
	SSHPort, ForwardPort int
	// User is the login name; default "sbx".
	User   string
	Logger *slog.Logger
}

// Fleet is the provider.
type Fleet struct {
	cfg  Config
	log  *slog.Logger
	mu   sync.Mutex
	next netip.Addr
	free []netip.Addr // addresses of destroyed sandboxes, reused first
	sbx  map[string]*sandbox
}

var _ provider.Provider = (*Fleet)(nil)

// New returns an empty fleet.
func New(cfg Config) (*Fleet, error) {
	if !cfg.Base.IsValid() {
		cfg.Base = netip.AddrFrom4([4]byte{127, 90, 0, 1})
	}
	if !cfg.Base.Is4() || !cfg.Base.IsLoopback() {
		return nil, fmt.Errorf("simfleet: base %s: want an IPv4 loopback address", cfg.Base)
	}
	if cfg.SSHPort == 0 {
		cfg.SSHPort = 22022
	}
	if cfg.ForwardPort == 0 {
		cfg.ForwardPort = 22023
	}
	if cfg.User == "" {
		cfg.User = "sbx"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fleet{cfg: cfg, log: log, next: cfg.Base, sbx: map[string]*sandbox{}}, nil
}

// addr hands out a loopback address; the caller holds f.mu.
func (f *Fleet) addr() (netip.Addr, error) {
	if n := len(f.free); n > 0 {
		a := f.free[n-1]
		f.free = f.free[:n-1]
		return a, nil
	}
	for {
		a := f.next
		if !a.IsLoopback() {
			return netip.Addr{}, errors.New("simfleet: loopback addresses exhausted")
		}
		f.next = a.Next()
		if b := a.As4(); b[3] != 0 && b[3] != 255 {
			return a, nil
		}
	}
}

// Provision starts the sandbox's two listeners, or returns the running
// sandbox's endpoint.
func (f *Fleet) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	hostKey, err := ssh.ParsePrivateKey(spec.HostKeyPEM)
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("simfleet: host key of %s: %w", spec.SandboxID, err)
	}
	ca, _, _, _, err := ssh.ParseAuthorizedKey([]byte(spec.UserCAKey))
	if err != nil {
		return provider.Endpoint{}, fmt.Errorf("simfleet: user CA of %s: %w", spec.SandboxID, err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.sbx[spec.SandboxID]; ok {
		return s.ep, nil
	}
	ip, err := f.addr()
	if err != nil {
		return provider.Endpoint{}, err
	}
	s, err := start(ip, f.cfg, hostKey, ca, f.log.With("sandbox_id", spec.SandboxID))
	if err != nil {
		f.free = append(f.free, ip)
		return provider.Endpoint{}, fmt.Errorf("simfleet: start %s: %w", spec.SandboxID, err)
	}
	f.sbx[spec.SandboxID] = s
	return s.ep, nil
}

// Destroy stops the sandbox's listeners and connections.
func (f *Fleet) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	s, ok := f.sbx[id]
	delete(f.sbx, id)
	f.mu.Unlock()
	if !ok {
		return nil
	}
	s.stop()
	f.mu.Lock()
	f.free = append(f.free, s.ip)
	f.mu.Unlock()
	return nil
}

// Status reports a sandbox: running while it is held.
func (f *Fleet) Status(ctx context.Context, id string) (provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.sbx[id]
	if !ok {
		return provider.Instance{SandboxID: id, Phase: provider.PhaseNotFound}, provider.ErrNotFound
	}
	return provider.Instance{SandboxID: id, Phase: provider.PhaseRunning, Endpoint: s.ep}, nil
}

// List reports every held sandbox.
func (f *Fleet) List(ctx context.Context) ([]provider.Instance, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]provider.Instance, 0, len(f.sbx))
	for id, s := range f.sbx {
		out = append(out, provider.Instance{SandboxID: id, Phase: provider.PhaseRunning, Endpoint: s.ep})
	}
	return out, nil
}

// Close stops every sandbox; control calls it on shutdown.
func (f *Fleet) Close() error {
	f.mu.Lock()
	all := f.sbx
	f.sbx = map[string]*sandbox{}
	f.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range all {
		wg.Go(s.stop)
	}
	wg.Wait()
	return nil
}

// Len is how many sandboxes the fleet holds.
func (f *Fleet) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.sbx)
}

// sandbox is one simulated sandbox: its SSH server and forwarder.
type sandbox struct {
	ip     netip.Addr
	ep     provider.Endpoint
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func start(ip netip.Addr, cfg Config, hostKey ssh.Signer, ca ssh.PublicKey, log *slog.Logger) (*sandbox, error) {
	sshAddr := netip.AddrPortFrom(ip, uint16(cfg.SSHPort)).String()
	fwdAddr := netip.AddrPortFrom(ip, uint16(cfg.ForwardPort)).String()
	sln, err := net.Listen("tcp", sshAddr)
	if err != nil {
		return nil, err
	}
	fln, err := net.Listen("tcp", fwdAddr)
	if err != nil {
		_ = sln.Close()
		return nil, err
	}
	// Not Provision's ctx: that one bounds the start, and the sandbox
	// lives until Destroy.
	ctx, cancel := context.WithCancel(context.Background())
	s := &sandbox{ip: ip, cancel: cancel, ep: provider.Endpoint{
		Addr: sshAddr, ForwardAddr: fwdAddr, User: cfg.User, Workspace: "/workspace", Boot: "cold_boot",
	}}
	srv := newServer(hostKey, ca, cfg.User, log)
	s.wg.Go(func() { srv.serve(ctx, sln) })
	fw := &podtcp.Forwarder{Logger: log, Keys: func() (podtcp.Keys, error) {
		return podtcp.Keys{HostKey: hostKey, UserCAs: []ssh.PublicKey{ca}, Principal: cfg.User}, nil
	}}
	s.wg.Go(func() {
		if err := fw.Serve(ctx, copyingListener{fln}); err != nil {
			log.Warn("simfleet: forwarder stopped", "err", err)
		}
	})
	return s, nil
}

func (s *sandbox) stop() {
	s.cancel()
	s.wg.Wait()
}

// Name is what webhook messages say the sandboxes run on.
func (f *Fleet) Name() string { return "simfleet" }

// copyingListener hands the forwarder connections that io.Copy cannot
// splice: a spliced TCP copy holds a kernel pipe (two descriptors) per
// direction while it waits, six descriptors a proxied connection where
// two would do, and with thousands of sandboxes' connections in one
// process the descriptor limit, not memory, is what runs out. Copies
// through a user-space buffer cost 32 KiB a direction instead, which a
// simulated fleet can afford.
type copyingListener struct{ net.Listener }

func (l copyingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return copyingConn{c}, nil
}

// copyingConn hides *net.TCPConn's ReadFrom and WriteTo but keeps its
// half-close, which the forwarder uses to pass an EOF on.
type copyingConn struct{ net.Conn }

func (c copyingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}
