package podtcp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/crypto/ssh"
)

// ErrRefused is a forwarder's answer that nothing listens on the port.
var ErrRefused = errors.New("podtcp: nothing listens on the port")

// ErrNoForwarder is a target without a forwarder address.
var ErrNoForwarder = errors.New("podtcp: the sandbox has no forwarder")

// Signer mints user certificates; *sshca.CA is one.
type Signer interface {
	UserSigner(principal, keyID string, ttl time.Duration) (ssh.Signer, error)
}

// Dialer opens connections to sandbox ports through their forwarders.
// It is safe for concurrent use.
type Dialer struct {
	CA Signer
	// KeyID names the edge in the forwarder's log.
	KeyID string
	// CertTTL is how long a minted certificate is valid; it is reused
	// for half of that. Default 10 minutes.
	CertTTL time.Duration
	// Timeout bounds the TCP connect plus the handshake. Default 10 s.
	// Time spent waiting for a handshake slot (MaxHandshakes) is bounded
	// by the caller's context only.
	Timeout time.Duration
	// MaxHandshakes bounds this dialer's connections to one forwarder
	// that are not yet past the handshake; more wait for a slot, in
	// order, until their context ends. It stays below the forwarder's
	// own MaxHandshakes (256), which closes the connections past it, so
	// that a burst of new connections from one edge (a thousand
	// keep-alive clients arriving at once) queues here instead of
	// failing there, with room left for the other replicas. Default
	// DefaultDialHandshakes.
	MaxHandshakes int

	mu    sync.Mutex // guards certs
	certs map[string]minted

	slotsMu sync.Mutex // guards slots
	slots   map[string]*handshakeSlots
}

// DefaultDialHandshakes is the Dialer's default MaxHandshakes: a quarter
// of the forwarder's, so four edge replicas bursting at once still fit.
const DefaultDialHandshakes = 64

// handshakeSlots are the handshake slots for one forwarder address;
// users counts the dials holding or waiting for one, so the entry goes
// when the last leaves.
type handshakeSlots struct {
	ch    chan struct{}
	users int
}

type minted struct {
	signer ssh.Signer
	renew  time.Time
}

// Dial connects to port on t's loopback through t's forwarder. The
// forwarder must prove t's pinned host key; ErrRefused (wrapped) says
// that the forwarder answered and nothing listens on the port.
func (d *Dialer) Dial(ctx context.Context, t Target, port int) (net.Conn, error) {
	if t.ForwardAddr == "" {
		return nil, fmt.Errorf("sandbox %s: %w", t.SandboxID, ErrNoForwarder)
	}
	if port <= 0 || port > 65535 {
		return nil, fmt.Errorf("sandbox %s: port %d out of range", t.SandboxID, port)
	}
	pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t.HostKey))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: parse pinned host key: %w", t.SandboxID, err)
	}
	signer, err := d.signer(t.User)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: mint certificate: %w", t.SandboxID, err)
	}
	release, err := d.acquire(ctx, t.ForwardAddr)
	if err != nil {
		return nil, fmt.Errorf("forwarder of sandbox %s at %s: waiting for a handshake slot: %w", t.SandboxID, t.ForwardAddr, err)
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, cmpOr(d.Timeout, 10*time.Second))
	defer cancel()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "tcp", t.ForwardAddr)
	if err != nil {
		return nil, fmt.Errorf("connect to forwarder of sandbox %s at %s: %w", t.SandboxID, t.ForwardAddr, err)
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = c.SetDeadline(time.Unix(1, 0)) })
	err = handshake(c, signer, pinned, port)
	if !stop() && err == nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		_ = c.Close()
		if errors.Is(err, ErrRefused) {
			return nil, fmt.Errorf("port %d in sandbox %s: %w", port, t.SandboxID, err)
		}
		return nil, fmt.Errorf("forwarder of sandbox %s at %s: %w", t.SandboxID, t.ForwardAddr, err)
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// acquire takes one of addr's handshake slots, waiting until ctx ends;
// release gives it back.
func (d *Dialer) acquire(ctx context.Context, addr string) (release func(), err error) {
	d.slotsMu.Lock()
	if d.slots == nil {
		d.slots = map[string]*handshakeSlots{}
	}
	s := d.slots[addr]
	if s == nil {
		n := d.MaxHandshakes
		if n <= 0 {
			n = DefaultDialHandshakes
		}
		s = &handshakeSlots{ch: make(chan struct{}, n)}
		d.slots[addr] = s
	}
	s.users++
	d.slotsMu.Unlock()
	leave := func() {
		d.slotsMu.Lock()
		if s.users--; s.users == 0 {
			delete(d.slots, addr)
		}
		d.slotsMu.Unlock()
	}
	select {
	case s.ch <- struct{}{}:
		return func() { <-s.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, context.Cause(ctx)
	}
}

// signer returns a certificate for principal, minting one when there is
// none or it is past half its life.
func (d *Dialer) signer(principal string) (ssh.Signer, error) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.certs[principal]; ok && now.Before(m.renew) {
		return m.signer, nil
	}
	ttl := cmpOr(d.CertTTL, 10*time.Minute)
	s, err := d.CA.UserSigner(principal, d.KeyID, ttl)
	if err != nil {
		return nil, err
	}
	if d.certs == nil {
		d.certs = map[string]minted{}
	}
	if len(d.certs) > 1024 {
		clear(d.certs) // principals are few; bound it anyway
	}
	d.certs[principal] = minted{signer: s, renew: now.Add(ttl / 2)}
	return s, nil
}

// ErrHostKey is a forwarder that did not prove the pinned host key: not
// the sandbox the edge meant to reach.
var ErrHostKey = errors.New("podtcp: forwarder did not prove the pinned host key")

// handshake is the edge's side of the wire (see the package comment).
func handshake(c net.Conn, signer ssh.Signer, pinned ssh.PublicKey, port int) error {
	var greet [len(magic) + nonceSize]byte
	if _, err := io.ReadFull(c, greet[:]); err != nil {
		return fmt.Errorf("read greeting: %w", err)
	}
	if !bytes.Equal(greet[:len(magic)], []byte(magic)) {
		return fmt.Errorf("not a podtcp forwarder (greeting %q)", greet[:len(magic)])
	}
	ns := greet[len(magic):]
	nc, err := newNonce()
	if err != nil {
		return err
	}
	hostKey := pinned.Marshal()
	t := transcript{Domain: domainClient, ServerNonce: ns, ClientNonce: nc, Port: uint32(port), HostKey: hostKey}
	sig, err := sign(signer, t.bytes())
	if err != nil {
		return fmt.Errorf("sign hello: %w", err)
	}
	if err := writeFrame(c, &hello{Cert: signer.PublicKey().Marshal(), Port: uint32(port), Nonce: nc, Sig: sig, HostKey: hostKey}); err != nil {
		return fmt.Errorf("write hello: %w", err)
	}
	var r reply
	if err := readFrame(c, &r); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the forwarder closed the connection: it refused the edge (its log says why)")
		}
		return fmt.Errorf("read reply: %w", err)
	}
	st := transcript{Domain: domainServer, ServerNonce: ns, ClientNonce: nc, Port: uint32(port), Status: r.Status, HostKey: hostKey}
	if err := verify(pinned, st.bytes(), r.Sig); err != nil {
		return fmt.Errorf("%w (%s): %w", ErrHostKey, ssh.FingerprintSHA256(pinned), err)
	}
	switch r.Status {
	case statusOpen:
		return nil
	case statusRefused:
		return ErrRefused
	default:
		return errors.New("the forwarder could not reach port " + strconv.Itoa(port))
	}
}
