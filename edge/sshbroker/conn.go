package sshbroker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/connlog"
)

// extFingerprint carries the verified key's fingerprint in Permissions.
const extFingerprint = "sbx-key-fp"

// maxKeysPerConn bounds the Authorizer lookups one connection can cause;
// OpenSSH offers at most a handful of keys.
const maxKeysPerConn = 16

var (
	errBadUsername  = errors.New("username cannot name a sandbox")
	errTooManyConns = errors.New("sandbox connection limit reached")
	errUpstream     = errors.New("sandbox unreachable")
	errMethod       = errors.New("auth method refused")
	errRateLimited  = errors.New("this key failed too often from this address; wait and retry")
)

// kick is a cancellation cause that is shown to the user before closing;
// why, when set, is the cause behind it (an *authority.Ended).
type kick struct {
	msg string
	why error
}

func (k kick) Error() string { return k.msg }
func (k kick) Unwrap() error { return k.why }

type authResult struct {
	route Route
	err   error
}

// clientConn is one client connection and, after auth, its upstream.
// Fields set during the handshake are only touched by the handshake
// goroutine until handshakeDone; mu guards the rest.
type clientConn struct {
	b      *Broker
	id     string
	nc     net.Conn
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelCauseFunc

	// Handshake state.
	deadline    time.Time
	results     map[string]authResult // by fingerprint
	verified    string                // fingerprint of the key that completed auth
	route       Route
	reserved    bool
	upChans     <-chan ssh.NewChannel
	upReqs      <-chan *ssh.Request
	serverChans <-chan ssh.NewChannel
	serverReqs  <-chan *ssh.Request
	preAuth     ssh.ServerPreAuthConn // sends banners while auth is under way

	sid      atomic.Value // sandbox ID once authenticated
	lastMark atomic.Int64 // unix nanos of the last Activity.Mark

	// rec is the connection log's record once authenticated; nil before
	// (and without a log), when its methods do nothing.
	rec *connlog.Conn
	// envNames are the environment variable names the client sent, for
	// the client kind; guarded by mu.
	envNames      []string
	explicit      string // SBX_CLIENT's value, guarded by mu
	clientVersion string // set before relay starts

	forwarding atomic.Bool // client asked for remote forwarding
	agent      atomic.Bool // client asked for agent forwarding

	mu       sync.Mutex
	sconn    *ssh.ServerConn
	up       ssh.Conn
	channels int
	sessions map[ssh.Channel]struct{}

	wg sync.WaitGroup // relay goroutines

	// eofMu keeps teardown's message to a session apart from the
	// session's half-close (see half).
	eofMu sync.Mutex
}

func (cc *clientConn) sandboxID() string {
	s, _ := cc.sid.Load().(string)
	return s
}

func (b *Broker) handle(nc net.Conn) {
	defer nc.Close()
	if !b.limiter.sourceAllowed(nc.RemoteAddr()) {
		// Cheapest refusal: no key exchange for a source that keeps failing.
		b.m.authFailures.WithLabelValues("rate_limited").Inc()
		return
	}
	// Read before the key is checked: an invalidation arriving while this
	// connection is authenticated is noticed when it registers.
	epoch := b.authz.Epoch()
	ctx, cancel := context.WithCancelCause(context.Background())
	cc := &clientConn{
		b: b, id: b.newConnID(), nc: nc, ctx: ctx, cancel: cancel,
		results:  make(map[string]authResult),
		sessions: make(map[ssh.Channel]struct{}),
	}
	cc.log = b.log.With("conn_id", cc.id, "remote_addr", nc.RemoteAddr().String())
	if !join(b, b.conns, cc) {
		cancel(nil)
		return
	}
	defer leave(b, b.conns, cc)

	// A cancellation (Close, Shutdown, Disconnect) closes the sockets,
	// which unblocks every other goroutine. AfterFunc, not a goroutine
	// parked on Done: an idle connection should hold as few stacks as it
	// can.
	watchDone := make(chan struct{})
	context.AfterFunc(ctx, func() {
		defer close(watchDone)
		cc.teardown(context.Cause(ctx))
	})
	defer func() {
		cancel(context.Canceled)
		<-watchDone
	}()

	sconn, err := cc.handshake()
	if cc.reserved {
		defer b.perSandbox.Release(cc.route.SandboxID)
	}
	if err != nil {
		b.m.handshakes.WithLabelValues("failed").Inc()
		cc.mu.Lock()
		if cc.up != nil {
			cc.up.Close()
		}
		cc.mu.Unlock()
		if b.log.Enabled(ctx, slog.LevelDebug) {
			cc.log.Debug("handshake failed", "err", err)
		}
		return
	}
	b.m.handshakes.WithLabelValues("ok").Inc()
	defer b.register(ctx, cc, epoch)()
	b.m.conns.Inc()
	defer b.m.conns.Dec()
	closeActivity := b.act.Open(cc.route.SandboxID)
	defer closeActivity()

	cc.log.Info("connected", "user", sconn.User(), "client_version", string(sconn.ClientVersion()))
	version := string(sconn.ClientVersion())
	cc.clientVersion = version
	cc.rec = b.cfg.Connections.Open(connlog.Record{
		SandboxID: cc.route.SandboxID, Kind: connlog.KindSSH, Credential: cc.verified,
		ClientAddr: nc.RemoteAddr().String(), ClientDetail: version,
		ClientKind: connlog.Detect(connlog.Signals{SSHVersion: version}),
	})
	defer func() { cc.rec.Close(logReason(context.Cause(ctx))) }()
	start := time.Now()
	cc.relay(sconn)
	cc.log.Info("disconnected", "duration", time.Since(start).Round(time.Millisecond), "cause", context.Cause(ctx))
}

// handshake runs key exchange and auth (which dials upstream) under the
// handshake deadline, and lifts the deadline once the client is in.
func (cc *clientConn) handshake() (*ssh.ServerConn, error) {
	b := cc.b
	cc.deadline = time.Now().Add(b.cfg.HandshakeTimeout)
	if err := cc.nc.SetDeadline(cc.deadline); err != nil {
		return nil, fmt.Errorf("set handshake deadline: %w", err)
	}
	sc := b.base
	sc.PublicKeyCallback = cc.publicKey
	sc.VerifiedPublicKeyCallback = cc.verifiedKey
	sc.AuthLogCallback = cc.authLog
	sc.PreAuthConnCallback = func(c ssh.ServerPreAuthConn) { cc.preAuth = c }
	version := sc.ServerVersion
	if version == "" {
		version = "SSH-2.0-Go" // x/crypto/ssh's own default
	}
	nc, ciphers, err := chooseCiphers(cc.nc, version, cc.deadline)
	if err != nil {
		return nil, fmt.Errorf("ssh version exchange: %w", err)
	}
	sc.Ciphers = ciphers
	sconn, chans, reqs, err := ssh.NewServerConn(nc, &sc)
	if err != nil {
		return nil, fmt.Errorf("ssh handshake: %w", err)
	}
	// Defence in depth against CVE-2024-45337-style confusion: the
	// permissions must name the very key verifiedKey approved.
	if sconn.Permissions == nil || sconn.Permissions.Extensions[extFingerprint] != cc.verified || cc.verified == "" || cc.upChans == nil {
		sconn.Close()
		return nil, errors.New("auth finished without a verified key")
	}
	if err := cc.nc.SetDeadline(time.Time{}); err != nil {
		sconn.Close()
		return nil, fmt.Errorf("lift handshake deadline: %w", err)
	}
	cc.mu.Lock()
	cc.sconn = sconn
	cc.mu.Unlock()
	cc.serverChans, cc.serverReqs = chans, reqs
	// Auth is over (x/crypto/ssh never runs its callbacks again): the
	// answers per offered key need not live as long as the connection.
	cc.results = nil
	return sconn, nil
}

// publicKey answers key queries and attempts. It accepts keys that are
// live credentials, and also keys whose credential expired or whose sandbox
// ended, so that only a client that then proves it holds the private key
// is told why (in verifiedKey). Everything else is a silent refusal.
func (cc *clientConn) publicKey(meta ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if _, isCert := key.(*ssh.Certificate); isCert {
		return nil, errMethod
	}
	fp := ssh.FingerprintSHA256(key)
	if !cc.b.limiter.credAllowed(cc.nc.RemoteAddr(), meta.User(), fp) {
		return nil, &offeredKeyError{fp: fp, err: errRateLimited}
	}
	res, ok := cc.results[fp]
	if !ok {
		if len(cc.results) >= maxKeysPerConn {
			return nil, &offeredKeyError{fp: fp, err: errMethod}
		}
		res = cc.authorize(meta.User(), fp)
		cc.results[fp] = res
	}
	if res.err == nil || errors.Is(res.err, ErrExpired) || errors.Is(res.err, ErrSandboxEnded) || cc.wakeable(res.err) {
		return &ssh.Permissions{Extensions: map[string]string{extFingerprint: fp}}, nil
	}
	return nil, &offeredKeyError{fp: fp, err: res.err}
}

// offeredKeyError is a refusal of one offered key; authLog charges the
// failure to that key's credential.
type offeredKeyError struct {
	fp  string
	err error
}

func (e *offeredKeyError) Error() string { return e.err.Error() }
func (e *offeredKeyError) Unwrap() error { return e.err }

func (cc *clientConn) authorize(user, fp string) authResult {
	if !validUsername(user) {
		return authResult{err: errBadUsername}
	}
	ctx, cancel := context.WithDeadline(cc.ctx, cc.deadline)
	defer cancel()
	route, err := cc.b.auth.Authorize(ctx, user, fp)
	if err != nil {
		return authResult{err: fmt.Errorf("authorize: %w", err)}
	}
	return authResult{route: route}
}

// verifiedKey runs only for the key whose signature was verified, so the
// route, the connection slot and the upstream all derive from that key and
// not from any key merely offered.
func (cc *clientConn) verifiedKey(meta ssh.ConnMetadata, key ssh.PublicKey, perms *ssh.Permissions, _ string) (*ssh.Permissions, error) {
	fp := ssh.FingerprintSHA256(key)
	if perms == nil || perms.Extensions[extFingerprint] != fp {
		return nil, errors.New("permissions do not match the verified key")
	}
	res, ok := cc.results[fp]
	if !ok {
		return nil, errors.New("verified key was never authorized")
	}
	if cc.wakeable(res.err) {
		res = cc.wake(meta.User(), fp, res.err)
	}
	if res.err != nil {
		return nil, &offeredKeyError{fp: fp, err: &ssh.BannerError{Err: res.err, Message: refusalMessage(meta.User(), res.err)}}
	}
	route := res.route
	log := cc.log.With("sandbox_id", route.SandboxID)
	if !cc.b.perSandbox.Acquire(route.SandboxID) {
		return nil, &ssh.BannerError{Err: errTooManyConns, Message: fmt.Sprintf(
			"sbx: sandbox %s already has %d open SSH connections; close some and retry.\r\n",
			route.SandboxID, cc.b.cfg.MaxConnsPerSandbox)}
	}
	// Marked before the dial, not only once the connection is open, so the
	// idle detector does not pick this sandbox while the handshake runs.
	cc.b.act.Mark(route.SandboxID)
	// The upstream gets its own budget, not what the client's handshake
	// has left: a sandbox sshd slow to answer (fifty logins at once)
	// would otherwise cut a client that already proved its key, whatever
	// UpstreamDialTimeout says (twice: a stale route is dialed again once
	// refreshed). Only a key holder gets here, as for wake.
	if err := cc.extendDeadline(2*cc.b.cfg.UpstreamDialTimeout + cc.b.cfg.HandshakeTimeout); err != nil {
		cc.b.perSandbox.Release(route.SandboxID)
		return nil, err
	}
	up, chans, reqs, err := cc.b.dialUpstream(cc.ctx, route, cc.id)
	if err != nil && cc.b.cfg.Waker != nil {
		fresh := cc.refreshRoute(meta.User(), fp)
		if fresh.err == nil {
			route = fresh.route
			up, chans, reqs, err = cc.b.dialUpstream(cc.ctx, route, cc.id)
		} else if msg := refusalMessage(meta.User(), fresh.err); msg != "" {
			// The route was cached before the sandbox ended (or the
			// credential expired): the fresh answer is why the dial
			// failed, and "try again shortly" would send the user round
			// in circles.
			cc.b.perSandbox.Release(route.SandboxID)
			log.Info("upstream dial failed; the sandbox's credential no longer admits", "err", err)
			return nil, &offeredKeyError{fp: fp, err: &ssh.BannerError{Err: fresh.err, Message: msg}}
		}
	}
	if err != nil {
		cc.b.perSandbox.Release(route.SandboxID)
		// The cached route may be stale (the sandbox was deleted, moved or
		// suspended): the next attempt asks the Authorizer afresh.
		if cc.b.cache != nil {
			cc.b.cache.Invalidate(route.SandboxID)
		}
		log.Warn("upstream dial failed", "err", err)
		return nil, &ssh.BannerError{Err: fmt.Errorf("%w: %w", errUpstream, err), Message: fmt.Sprintf(
			"sbx: sandbox %s is not reachable right now; try again shortly.\r\n", route.SandboxID)}
	}
	cc.reserved = true
	cc.route = route
	cc.verified = fp
	cc.upChans, cc.upReqs = chans, reqs
	cc.mu.Lock()
	cc.up = up
	cc.mu.Unlock()
	cc.sid.Store(route.SandboxID)
	cc.log = log
	return &ssh.Permissions{Extensions: map[string]string{extFingerprint: fp}}, nil
}

// extendDeadline moves the handshake deadline to d from now, if that is
// later.
func (cc *clientConn) extendDeadline(d time.Duration) error {
	if until := time.Now().Add(d); until.After(cc.deadline) {
		cc.deadline = until
		if err := cc.nc.SetDeadline(until); err != nil {
			return fmt.Errorf("extend handshake deadline for the upstream: %w", err)
		}
	}
	return nil
}

// refusalMessage is what a key holder is told. Only reasons about the
// holder's own credential are explained.
func refusalMessage(user string, err error) string {
	switch {
	case errors.Is(err, ErrExpired):
		return fmt.Sprintf("sbx: this SSH credential for %s has expired.\r\n"+
			"Get a new one with `sbx ssh %s` (or POST /api/v1/sandboxes/{id}/ssh_tokens).\r\n", user, user)
	case errors.Is(err, ErrSandboxEnded):
		return fmt.Sprintf("sbx: sandbox %s has ended; its SSH credentials no longer work.\r\n"+
			"Create a new sandbox to continue.\r\n", user)
	case errors.Is(err, errWakeFailed):
		// Only reached by a holder of a key for this sandbox (wake runs
		// after the signature check).
		return fmt.Sprintf("sbx: sandbox %s could not be woken in time; try again shortly.\r\n", user)
	}
	return ""
}

// authLog counts failures against the offered credential's bucket and the
// source's ceiling (see authLimits), and cuts the connection once the
// source's ceiling is spent.
func (cc *clientConn) authLog(meta ssh.ConnMetadata, method string, err error) {
	if err == nil || method == "none" {
		return // OpenSSH always opens with "none" to learn the methods.
	}
	if errors.Is(err, errUpstream) || errors.Is(err, errTooManyConns) {
		// Not the client's fault; do not spend its failure budget.
		cc.b.m.authFailures.WithLabelValues(reasonLabel(err)).Inc()
		return
	}
	reason := reasonLabel(err)
	if method != "publickey" {
		reason = "method"
	}
	cc.b.m.authFailures.WithLabelValues(reason).Inc()
	cc.log.Info("auth refused", "user", loggedUser(meta.User()), "method", method, "reason", reason)
	var oke *offeredKeyError
	fp := ""
	if errors.As(err, &oke) {
		fp = oke.fp
	}
	if !cc.b.limiter.fail(cc.nc.RemoteAddr(), meta.User(), fp) {
		cc.log.Warn("failed-auth rate limit of the source reached; closing")
		cc.nc.Close()
	}
}

// loggedUser is a refused client's username as logged. The client picks
// it, up to a packet's size: one longer than a valid name is cut, so every
// refused attempt cannot write tens of kilobytes to the log.
func loggedUser(u string) string {
	if len(u) <= maxUsernameLen {
		return u
	}
	return u[:maxUsernameLen] + "... (" + strconv.Itoa(len(u)) + " bytes)"
}

// dialUpstream connects to the sandbox's sshd with a fresh certificate and
// refuses any host key but the pinned one.
func (b *Broker) dialUpstream(ctx context.Context, route Route, connID string) (ssh.Conn, <-chan ssh.NewChannel, <-chan *ssh.Request, error) {
	start := time.Now()
	hostKey, _, _, _, err := ssh.ParseAuthorizedKey([]byte(route.HostKey))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("parse pinned host key: %w", err)
	}
	signer, err := b.cfg.CA.UserSigner(route.User, "edge:"+connID, b.cfg.UpstreamCertTTL)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("sign upstream certificate: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.UpstreamDialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", route.Addr)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("dial %s: %w", route.Addr, err)
	}
	deadline, _ := ctx.Deadline()
	// Closing nc on cancellation bounds the handshake even if the deadline
	// below is missed by a shutdown racing with us.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	nc.SetDeadline(deadline)
	conn, chans, reqs, err := ssh.NewClientConn(nc, route.Addr, &ssh.ClientConfig{
		Config:            ssh.Config{Ciphers: b.cfg.UpstreamCiphers},
		User:              route.User,
		Auth:              []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback:   ssh.FixedHostKey(hostKey),
		HostKeyAlgorithms: hostKeyAlgorithms(hostKey),
	})
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			err = ctx.Err()
		}
		return nil, nil, nil, fmt.Errorf("ssh handshake with %s: %w", route.Addr, err)
	}
	nc.SetDeadline(time.Time{})
	b.m.dial.Observe(time.Since(start).Seconds())
	return conn, chans, reqs, nil
}

// hostKeyAlgorithms asks only for the pinned key's algorithms, so a sandbox
// with several host keys presents the one we can check.
func hostKeyAlgorithms(k ssh.PublicKey) []string {
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{k.Type()}
}
