// Package podssh is how control and the edge talk to a sandbox: every byte
// goes over SSH to the sandbox's sshd (exec channels, direct-tcpip; SFTP
// through control/podfiles, which the edge does not link),
// on pooled connections per sandbox (one by default) authenticated with a
// short-lived certificate from the internal CA, to a host key pinned at
// provisioning.
package podssh

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/internal/podtcp"
)

// Target says how to reach one sandbox's sshd (and its port forwarder).
// It is podtcp's, which the sandbox's own init links: the type lives
// with the smaller package so the init needs no SSH client pool.
type Target = podtcp.Target

// ErrPoolClosed is returned by calls made after Close.
var ErrPoolClosed = errors.New("podssh: pool closed")

// HostKeyMismatchError reports a sandbox presenting a host key other than
// the pinned one: a misrouted address or a man in the middle.
type HostKeyMismatchError struct {
	SandboxID string
	Addr      string
	Got, Want string // SHA256 fingerprints
}

func (e *HostKeyMismatchError) Error() string {
	return fmt.Sprintf("sandbox %s at %s: host key %s does not match pinned %s", e.SandboxID, e.Addr, e.Got, e.Want)
}

// Option configures a Pool.
type Option func(*Pool)

// WithCertTTL sets how long each minted user certificate is valid. It only
// has to outlive the handshake: an established connection stays up.
func WithCertTTL(d time.Duration) Option { return func(p *Pool) { p.certTTL = d } }

// WithKeyID sets the certificate key ID, which names us in sshd logs.
func WithKeyID(id string) Option { return func(p *Pool) { p.keyID = id } }

// WithDialTimeout bounds TCP connect plus SSH handshake.
func WithDialTimeout(d time.Duration) Option { return func(p *Pool) { p.dialTimeout = d } }

// WithKeepalive sets how often an idle connection is probed and how long a
// probe may go unanswered before the connection is dropped.
func WithKeepalive(interval, timeout time.Duration) Option {
	return func(p *Pool) { p.keepaliveInterval, p.keepaliveTimeout = interval, timeout }
}

// preferredCiphers puts AES-GCM first: it is hardware-accelerated on the
// machines we run on and authenticates without a separate MAC pass.
var preferredCiphers = []string{
	"aes128-gcm@openssh.com", "aes256-gcm@openssh.com",
	"chacha20-poly1305@openssh.com",
	"aes128-ctr", "aes192-ctr", "aes256-ctr",
}

// WithConnsPerSandbox spreads the callers of Client over n connections
// per sandbox (1, the default, keeps one), taken in turn; Exec and SFTP
// stay on the first. One connection is one reader goroutine on our side
// and one sshd process on the sandbox's, which every channel on it waits
// behind: the preview proxy, with many concurrent direct-tcpip channels
// per sandbox, uses a few.
func WithConnsPerSandbox(n int) Option {
	return func(p *Pool) { p.perSandbox = max(n, 1) }
}

// Pool holds one SSH connection per sandbox (or a few, see
// WithConnsPerSandbox), shared by all callers, plus an SFTP client on the
// first. Connections are dialled lazily, dropped when broken,
// and redialled on the next call. Close closes every connection and waits
// for every goroutine the pool started.
type Pool struct {
	ca                *sshca.CA
	logger            *slog.Logger
	certTTL           time.Duration
	keyID             string
	dialTimeout       time.Duration
	keepaliveInterval time.Duration
	keepaliveTimeout  time.Duration
	perSandbox        int
	turn              atomic.Uint32 // Client's round robin over the perSandbox slots

	ctx    context.Context // cancelled by Close; parent of dials
	cancel context.CancelFunc
	wg     sync.WaitGroup // dial and keepalive goroutines

	mu     sync.Mutex // guards conns and closed
	conns  map[connKey]*poolConn
	closed bool
}

// connKey names one of a sandbox's pooled connections.
type connKey struct {
	sandboxID string
	slot      int // 0..perSandbox-1; Exec and Attached use 0
}

// poolConn is one sandbox's connection. ready is closed when the dial
// finished; client and err are immutable after that. done is closed when
// the connection is gone.
type poolConn struct {
	key    connKey
	target Target
	ready  chan struct{}
	client *ssh.Client
	err    error
	done   chan struct{}

	attachedMu sync.Mutex // guards attached
	attached   map[any]io.Closer
}

// NewPool returns an empty pool minting certificates from ca.
func NewPool(ca *sshca.CA, logger *slog.Logger, opts ...Option) *Pool {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Pool{
		ca:                ca,
		logger:            logger,
		certTTL:           5 * time.Minute,
		keyID:             "control",
		dialTimeout:       10 * time.Second,
		keepaliveInterval: 15 * time.Second,
		keepaliveTimeout:  10 * time.Second,
		ctx:               ctx,
		cancel:            cancel,
		perSandbox:        1,
		conns:             map[connKey]*poolConn{},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// Client returns the pooled connection to t, dialling it if needed.
// Concurrent callers for one sandbox share a single dial. A target whose
// address, user or host key changed (e.g. restored on a new port) replaces
// the old connection.
//
// With WithConnsPerSandbox(n), successive calls take the sandbox's n
// connections in turn.
func (p *Pool) Client(ctx context.Context, t Target) (*ssh.Client, error) {
	slot := 0
	if p.perSandbox > 1 {
		slot = int(p.turn.Add(1) % uint32(p.perSandbox))
	}
	c, err := p.conn(ctx, t, slot)
	if err != nil {
		return nil, err
	}
	return c.client, nil
}

// Attached returns what is kept on t's pooled connection under key,
// opening it with open on that connection the first time; it is closed
// with the connection (Forget, a failed keepalive, Close), and the next
// call opens it afresh on the new one. It is how control/podfiles keeps
// one SFTP client per connection without podssh, and so the edge, linking
// an SFTP client. key is compared with ==; use an unexported type.
func (p *Pool) Attached(ctx context.Context, t Target, key any, open func(context.Context, *ssh.Client) (io.Closer, error)) (io.Closer, error) {
	c, err := p.conn(ctx, t, 0)
	if err != nil {
		return nil, err
	}
	c.attachedMu.Lock()
	defer c.attachedMu.Unlock()
	if v, ok := c.attached[key]; ok {
		return v, nil
	}
	v, err := open(ctx, c.client)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", t.SandboxID, err)
	}
	if c.attached == nil {
		c.attached = make(map[any]io.Closer)
	}
	c.attached[key] = v
	return v, nil
}

// Exec runs req on t's pooled connection. An empty req.Dir means the
// target's workspace. If the pooled connection turns out to be dead before
// the command started, it is dropped and the command is tried once on a
// fresh connection; a command that started is never re-run.
func (p *Pool) Exec(ctx context.Context, t Target, req ExecRequest) (ExecResult, error) {
	if req.Dir == "" {
		req.Dir = t.Workspace
	}
	var res ExecResult
	err := p.onConn(ctx, t, func(c *ssh.Client) error {
		var err error
		res, err = Exec(ctx, c, req)
		return err
	})
	return res, err
}

// onConn runs fn on t's pooled connection. If the connection turns out to
// be dead before fn's session opened, it is dropped and fn is tried once
// on a fresh connection; a command that started is never re-run.
func (p *Pool) onConn(ctx context.Context, t Target, fn func(*ssh.Client) error) error {
	for attempt := 0; ; attempt++ {
		c, err := p.conn(ctx, t, 0)
		if err != nil {
			return err
		}
		err = fn(c.client)
		// Only a dead connection is worth a redial; a refused channel (e.g.
		// sshd's MaxSessions) says nothing about the connection others use.
		var oe *sessionOpenError
		var refused *ssh.OpenChannelError
		if attempt == 0 && errors.As(err, &oe) && !errors.As(err, &refused) && ctx.Err() == nil {
			p.drop(c)
			continue
		}
		if err != nil {
			return fmt.Errorf("sandbox %s: %w", t.SandboxID, err)
		}
		return nil
	}
}

// Forget closes and drops the connections to a sandbox (destroyed,
// suspended, or moved). The next call dials afresh.
func (p *Pool) Forget(sandboxID string) {
	var gone []*poolConn
	p.mu.Lock()
	for slot := range p.perSandbox {
		k := connKey{sandboxID, slot}
		if c := p.conns[k]; c != nil {
			gone = append(gone, c)
			delete(p.conns, k)
		}
	}
	p.mu.Unlock()
	for _, c := range gone {
		c.close()
	}
}

// Close closes every connection and waits for the pool's goroutines.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[connKey]*poolConn{}
	p.mu.Unlock()
	p.cancel()
	for _, c := range conns {
		c.close()
	}
	p.wg.Wait()
	return nil
}

func (p *Pool) conn(ctx context.Context, t Target, slot int) (*poolConn, error) {
	if t.SandboxID == "" {
		return nil, errors.New("podssh: target has no sandbox id")
	}
	key := connKey{t.SandboxID, slot}
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, ErrPoolClosed
		}
		c := p.conns[key]
		if c != nil && c.target != t {
			// The sandbox moved or was re-keyed: the old connection is to
			// something we no longer trust to be it.
			delete(p.conns, key)
			p.wg.Add(1)
			// old, not c: c is about to name the new connection, which
			// this goroutine must not close.
			old := c
			go func() { defer p.wg.Done(); old.close() }() // may block; don't hold mu
			c = nil
		}
		if c == nil {
			c = &poolConn{key: key, target: t, ready: make(chan struct{}), done: make(chan struct{})}
			p.conns[key] = c
			p.wg.Add(1)
			go p.dial(c)
		}
		p.mu.Unlock()

		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to sandbox %s: %w", t.SandboxID, context.Cause(ctx))
		}
		if c.err != nil {
			// Failures are not cached: the next call dials again.
			p.drop(c)
			return nil, c.err
		}
		select {
		case <-c.done:
			p.drop(c) // broken since; redial
			continue
		default:
			return c, nil
		}
	}
}

// drop removes c if it is still the pooled connection in its slot, and
// closes it.
func (p *Pool) drop(c *poolConn) {
	p.mu.Lock()
	if p.conns[c.key] == c {
		delete(p.conns, c.key)
	}
	p.mu.Unlock()
	c.close()
}

// dial runs detached from any caller's context, so one impatient caller
// cannot fail the dial for everyone sharing it; Close cancels it.
func (p *Pool) dial(c *poolConn) {
	defer p.wg.Done()
	client, err := p.dialSSH(c.target)
	p.mu.Lock()
	if err == nil && (p.closed || p.conns[c.key] != c) {
		// Forgotten while dialling.
		client.Close()
		client, err = nil, fmt.Errorf("connect to sandbox %s: connection dropped while dialling", c.target.SandboxID)
		if p.closed {
			err = ErrPoolClosed
		}
	}
	c.client, c.err = client, err
	if err == nil {
		p.wg.Add(1)
		go p.keepalive(c)
	} else {
		close(c.done)
	}
	p.mu.Unlock()
	close(c.ready)
}

func (p *Pool) dialSSH(t Target) (*ssh.Client, error) {
	pinned, _, _, _, err := ssh.ParseAuthorizedKey([]byte(t.HostKey))
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: parse pinned host key: %w", t.SandboxID, err)
	}
	signer, err := p.ca.UserSigner(t.User, p.keyID, p.certTTL)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: mint certificate: %w", t.SandboxID, err)
	}
	fixed := ssh.FixedHostKey(pinned)
	cfg := &ssh.ClientConfig{
		User: t.User,
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			if fixed(host, remote, key) != nil {
				return &HostKeyMismatchError{
					SandboxID: t.SandboxID, Addr: t.Addr,
					Got: ssh.FingerprintSHA256(key), Want: ssh.FingerprintSHA256(pinned),
				}
			}
			return nil
		},
		// Ask for the pinned key's algorithm so a server holding several
		// host keys presents the one we pinned.
		HostKeyAlgorithms: hostKeyAlgorithms(pinned),
		Config:            ssh.Config{Ciphers: preferredCiphers},
		Timeout:           p.dialTimeout,
	}

	ctx, cancel := context.WithTimeout(p.ctx, p.dialTimeout)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", t.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to sandbox %s at %s: %w", t.SandboxID, t.Addr, err)
	}
	// The handshake has no context: closing the socket aborts it.
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	sc, chans, reqs, err := ssh.NewClientConn(nc, t.Addr, cfg)
	if !stop() || err != nil {
		nc.Close()
		if err == nil {
			err = context.Cause(ctx)
		}
		return nil, fmt.Errorf("ssh handshake with sandbox %s at %s: %w", t.SandboxID, t.Addr, err)
	}
	p.logger.Debug("podssh connected", "sandbox_id", t.SandboxID, "addr", t.Addr)
	return ssh.NewClient(sc, chans, reqs), nil
}

func hostKeyAlgorithms(k ssh.PublicKey) []string {
	if k.Type() == ssh.KeyAlgoRSA {
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	}
	return []string{k.Type()}
}

// keepalive probes the connection and marks it done when it breaks, so the
// next caller redials instead of waiting on a dead socket.
func (p *Pool) keepalive(c *poolConn) {
	defer p.wg.Done()
	defer close(c.done)
	waitErr := make(chan error, 1) // buffered: the waiter never blocks on send
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		waitErr <- c.client.Wait()
	}()
	tick := time.NewTicker(p.keepaliveInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-waitErr:
			p.logger.Debug("podssh connection closed", "sandbox_id", c.target.SandboxID, "err", err)
			return
		case <-p.ctx.Done():
			c.client.Close()
			<-waitErr
			return
		case <-tick.C:
			// A silently dead peer would block SendRequest forever; the
			// timer closes the client, which unblocks it.
			timer := time.AfterFunc(p.keepaliveTimeout, func() { c.client.Close() })
			_, _, err := c.client.SendRequest("keepalive@openssh.com", true, nil)
			timer.Stop()
			if err != nil {
				p.logger.Info("podssh keepalive failed; dropping connection", "sandbox_id", c.target.SandboxID, "err", err)
				c.client.Close()
				<-waitErr
				return
			}
		}
	}
}

func (c *poolConn) close() {
	<-c.ready
	c.attachedMu.Lock()
	for k, v := range c.attached {
		v.Close()
		delete(c.attached, k)
	}
	c.attachedMu.Unlock()
	if c.client != nil {
		c.client.Close()
	}
}
