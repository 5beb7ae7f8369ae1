package podtcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/netlimit"
)

// Keys is what a forwarder checks the edge against and proves itself
// with: the same files the sandbox's sshd is given.
type Keys struct {
	// HostKey is the sandbox's host key, the one control pinned.
	HostKey ssh.Signer
	// UserCAs are the CA keys whose user certificates are accepted
	// (sshd's TrustedUserCAKeys).
	UserCAs []ssh.PublicKey
	// Principal is the login name a certificate must name.
	Principal string
}

// Forwarder serves the edge's connections to the sandbox's ports.
type Forwarder struct {
	// Keys returns the current keys; it is asked on every handshake, so
	// a warm pod that is claimed (and given another sandbox's keys) is
	// the new sandbox from its next connection on. An error refuses the
	// connection.
	Keys func() (Keys, error)
	// Logger receives refusals (with their reason) and failures.
	Logger *slog.Logger
	// HandshakeTimeout bounds the edge's hello; default 10 s.
	HandshakeTimeout time.Duration
	// DialTimeout bounds connecting to the port; default 5 s.
	DialTimeout time.Duration
	// MaxHandshakes bounds connections not yet past the handshake
	// (sshd's MaxStartups, in effect). Default 256.
	MaxHandshakes int
	// HandshakeQueue is how long the next connection past MaxHandshakes
	// waits for a slot before it is closed; while it waits, accepting
	// stops and later ones wait in the kernel's backlog. A handshake
	// takes a millisecond or so, so a burst of new connections (an
	// edge's thousand clients arriving at once, or several edges) is
	// served in order instead of failing; a flood of connections that
	// never finish their hello is still cut, each after HandshakeTimeout.
	// Default 2 s; negative closes them at once.
	HandshakeQueue time.Duration
	// Now is the clock certificates are checked against; default
	// time.Now.
	Now func() time.Time
}

// Serve accepts connections on ln until ctx ends or ln fails. It closes
// ln and every connection it started when ctx ends, and returns only
// after all of them are done: nil when ctx ended, else the accept error.
func (f *Forwarder) Serve(ctx context.Context, ln net.Listener) error {
	log := f.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(ctx, func() { _ = ln.Close() })
	defer stop()

	var (
		wg    sync.WaitGroup
		mu    sync.Mutex // guards conns
		conns = map[net.Conn]struct{}{}
	)
	track := func(c net.Conn, add bool) bool {
		mu.Lock()
		defer mu.Unlock()
		if !add {
			delete(conns, c)
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		conns[c] = struct{}{}
		return true
	}
	defer func() {
		cancel()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}()

	n := f.MaxHandshakes
	if n <= 0 {
		n = 256
	}
	handshakes := make(chan struct{}, n)
	var delay netlimit.Backoff
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if netlimit.Temporary(err) {
				// A shortage of descriptors or memory, which the
				// connections being served give back: a forwarder that
				// stopped on one would leave its sandbox's ports
				// unreachable until the sandbox restarts.
				time.Sleep(delay.Next())
				continue
			}
			return fmt.Errorf("podtcp: accept: %w", err)
		}
		delay.Reset()
		if !f.handshakeSlot(ctx, handshakes) {
			log.Warn("podtcp: too many connections in their handshake; closing a new one", "remote", c.RemoteAddr().String())
			_ = c.Close()
			continue
		}
		wg.Go(func() {
			if !track(c, true) {
				_ = c.Close()
				return
			}
			defer track(c, false)
			f.serveConn(ctx, c, log, func() { <-handshakes },
				func(up net.Conn) bool { return track(up, true) }, func(up net.Conn) { track(up, false) })
		})
	}
}

// handshakeSlot takes a slot in handshakes, waiting up to
// HandshakeQueue for one; false when none came or ctx ended.
func (f *Forwarder) handshakeSlot(ctx context.Context, handshakes chan struct{}) bool {
	select {
	case handshakes <- struct{}{}:
		return true
	default:
	}
	wait := f.HandshakeQueue
	if wait == 0 {
		wait = 2 * time.Second
	}
	if wait < 0 {
		return false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case handshakes <- struct{}{}:
		return true
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
}

// serveConn runs one connection: the handshake (it calls shaken once the
// edge has proved itself, or when the handshake fails), then the stream.
// add and remove track the port's connection so Serve can close it.
func (f *Forwarder) serveConn(ctx context.Context, c net.Conn, log *slog.Logger, shaken func(), add func(net.Conn) bool, remove func(net.Conn)) {
	defer c.Close()
	remote := c.RemoteAddr().String()
	released := false
	release := func() {
		if !released {
			released = true
			shaken()
		}
	}
	up, err := f.handshake(ctx, c, release)
	release()
	if err != nil {
		var d *dialError
		if errors.As(err, &d) {
			log.Debug("podtcp: port not reachable", "remote", remote, "port", d.port, "err", d.err)
		} else {
			log.Info("podtcp: connection refused", "remote", remote, "reason", err)
		}
		return
	}
	if !add(up) {
		_ = up.Close()
		return
	}
	defer remove(up)
	pipe(c, up)
}

type dialError struct {
	port int
	err  error
}

func (e *dialError) Error() string { return fmt.Sprintf("port %d: %v", e.port, e.err) }

// handshake checks the edge's hello, connects to the port it names and
// answers. It returns the port's connection when the stream may begin.
// It calls authed as soon as the hello checks out: from there on the
// connection is the edge's, not a stranger's, and its handshake slot
// goes back before the answer leaves, so an edge that bounds its own
// handshakes below MaxHandshakes never finds the forwarder full.
func (f *Forwarder) handshake(ctx context.Context, c net.Conn, authed func()) (net.Conn, error) {
	_ = c.SetDeadline(time.Now().Add(cmpOr(f.HandshakeTimeout, 10*time.Second)))
	keys, err := f.Keys()
	if err != nil {
		return nil, fmt.Errorf("no keys: %w", err)
	}
	if keys.HostKey == nil || len(keys.UserCAs) == 0 || keys.Principal == "" {
		return nil, errors.New("no keys: host key, CA or principal missing")
	}
	ns, err := newNonce()
	if err != nil {
		return nil, err
	}
	if _, err := c.Write(append([]byte(magic), ns...)); err != nil {
		return nil, fmt.Errorf("write greeting: %w", err)
	}
	var h hello
	if err := readFrame(c, &h); err != nil {
		return nil, fmt.Errorf("read hello: %w", err)
	}
	if err := f.checkHello(keys, ns, &h); err != nil {
		return nil, err
	}
	authed()
	if !bytes.Equal(h.HostKey, keys.HostKey.PublicKey().Marshal()) {
		// The edge meant another sandbox (this address was its pod's).
		// This one's signature tells it so; nothing is opened.
		if err := answer(c, keys, ns, &h, statusOther); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("the edge pinned another host key (%s)", fingerprint(h.HostKey))
	}

	port := int(h.Port)
	up, derr := f.dialPort(ctx, port)
	status := statusOpen
	switch {
	case derr == nil:
	case errors.Is(derr, syscall.ECONNREFUSED):
		status = statusRefused
	default:
		status = statusFailed
	}
	if err := answer(c, keys, ns, &h, status); err != nil {
		if up != nil {
			_ = up.Close()
		}
		return nil, err
	}
	if derr != nil {
		return nil, &dialError{port: port, err: derr}
	}
	_ = c.SetDeadline(time.Time{})
	return up, nil
}

// answer writes the reply with status, signed by the host key.
func answer(c net.Conn, keys Keys, ns []byte, h *hello, status uint32) error {
	t := transcript{Domain: domainServer, ServerNonce: ns, ClientNonce: h.Nonce, Port: h.Port, Status: status,
		HostKey: keys.HostKey.PublicKey().Marshal()}
	sig, err := sign(keys.HostKey, t.bytes())
	if err == nil {
		err = writeFrame(c, &reply{Status: status, Sig: sig})
	}
	if err != nil {
		return fmt.Errorf("write reply: %w", err)
	}
	return nil
}

func fingerprint(wire []byte) string {
	k, err := ssh.ParsePublicKey(wire)
	if err != nil {
		return "unparsable"
	}
	return ssh.FingerprintSHA256(k)
}

// checkHello verifies that the hello comes from a holder of a CA-signed
// user certificate for the principal, signed over this connection's
// nonce, for the host key it names (which handshake compares with this
// sandbox's).
func (f *Forwarder) checkHello(keys Keys, ns []byte, h *hello) error {
	if len(h.Nonce) != nonceSize {
		return fmt.Errorf("%w: nonce of %d bytes", errFrame, len(h.Nonce))
	}
	if h.Port == 0 || h.Port > 65535 {
		return fmt.Errorf("%w: port %d", errFrame, h.Port)
	}
	pub, err := ssh.ParsePublicKey(h.Cert)
	if err != nil {
		return fmt.Errorf("parse certificate: %w", err)
	}
	cert, ok := pub.(*ssh.Certificate)
	if !ok {
		return errors.New("a plain key, not a certificate")
	}
	checker := ssh.CertChecker{
		IsUserAuthority: func(auth ssh.PublicKey) bool {
			for _, ca := range keys.UserCAs {
				if bytes.Equal(auth.Marshal(), ca.Marshal()) {
					return true
				}
			}
			return false
		},
		Clock: f.Now,
	}
	if cert.CertType != ssh.UserCert {
		return errors.New("not a user certificate")
	}
	if !checker.IsUserAuthority(cert.SignatureKey) {
		return fmt.Errorf("certificate %q signed by an unknown authority %s", cert.KeyId, ssh.FingerprintSHA256(cert.SignatureKey))
	}
	if err := checker.CheckCert(keys.Principal, cert); err != nil {
		return fmt.Errorf("certificate %q: %w", cert.KeyId, err)
	}
	if len(cert.CriticalOptions) > 0 {
		// source-address and force-command cannot be honoured here;
		// a certificate restricted by them is not for this road.
		return fmt.Errorf("certificate %q carries critical options", cert.KeyId)
	}
	t := transcript{Domain: domainClient, ServerNonce: ns, ClientNonce: h.Nonce, Port: h.Port, HostKey: h.HostKey}
	if err := verify(cert.Key, t.bytes(), h.Sig); err != nil {
		return fmt.Errorf("certificate %q: %w", cert.KeyId, err)
	}
	return nil
}

// dialPort connects to port on the sandbox's loopback, IPv4 first, then
// IPv6 when nothing listens on IPv4 (dev servers bind "localhost", which
// resolves to either).
func (f *Forwarder) dialPort(ctx context.Context, port int) (net.Conn, error) {
	d := net.Dialer{Timeout: cmpOr(f.DialTimeout, 5*time.Second)}
	p := strconv.Itoa(port)
	c, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", p))
	if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
		return c, err
	}
	c, err6 := d.DialContext(ctx, "tcp", net.JoinHostPort("::1", p))
	if err6 == nil {
		return c, nil
	}
	if errors.Is(err6, syscall.ECONNREFUSED) {
		return nil, err6
	}
	// No IPv6 loopback at all: the IPv4 refusal is the answer.
	return nil, err
}

// pipe copies both ways until both directions end, passing half-closes
// on; an error in either direction ends both. On Linux, TCP to TCP
// copies splice in the kernel.
func pipe(a, b net.Conn) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(b, a)
	}()
	copyHalf(a, b)
	<-done
	_ = a.Close()
	_ = b.Close()
}

// copyHalf copies src to dst, then half-closes dst; on a failed copy it
// closes both, which also ends the other direction.
func copyHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err != nil {
		_ = dst.Close()
		_ = src.Close()
		return
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
