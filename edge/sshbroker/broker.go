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
	"golang.org/x/sync/errgroup"

	"github.com/sbxedge/sbx/edge/internal/slots"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// ErrServerClosed is returned by Serve after Shutdown or Close.
var ErrServerClosed = errors.New("sshbroker: server closed")

// Messages written to a client's open sessions when the broker ends them.
const (
	msgShutdown = "sbx: the SSH edge is restarting; reconnect to continue."
)

// Broker accepts client SSH connections and relays them to sandboxes.
//
// Close and Shutdown return only after every goroutine the broker started
// has returned.
type Broker struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	act     Activity
	limiter *authLimits
	auth    Authorizer       // cfg.Authorizer, behind cache when it is on
	cache   *authCache       // nil when the cache is off
	base    ssh.ServerConfig // host keys and fixed options; copied per connection

	nextID atomic.Uint64
	wg     sync.WaitGroup // one per connection handler

	perSandbox *slots.Limit // connections per sandbox

	// mu guards everything below.
	mu        sync.Mutex
	closing   bool
	listeners map[net.Listener]struct{}
	conns     map[*clientConn]struct{}
}

// New validates cfg and returns a Broker ready to Serve.
func New(cfg Config) (*Broker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	b := &Broker{
		cfg:        cfg,
		log:        cfg.Logger,
		m:          m,
		act:        cfg.Activity,
		limiter:    newAuthLimits(cfg),
		listeners:  make(map[net.Listener]struct{}),
		conns:      make(map[*clientConn]struct{}),
		perSandbox: slots.New(cfg.MaxConnsPerSandbox),
	}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.auth = cfg.Authorizer
	if cfg.AuthCacheTTL > 0 || cfg.AuthRefusalTTL > 0 {
		if b.cache, err = newAuthCache(cfg.Authorizer, cfg.AuthCacheTTL, cfg.AuthRefusalTTL, cfg.AuthCacheSize, m); err != nil {
			return nil, err
		}
		b.auth = b.cache
	}
	if b.act == nil {
		b.act = nopActivity{}
	}
	b.base = ssh.ServerConfig{
		MaxAuthTries:  cfg.MaxAuthTries,
		ServerVersion: cfg.ServerVersion,
	}
	restrictAlgorithms(&b.base)
	for _, k := range cfg.HostKeys {
		b.base.AddHostKey(hostKeySigner(k))
	}
	return b, nil
}

// Serve accepts connections on ln until Shutdown or Close, and then returns
// ErrServerClosed. It may be called for several listeners.
func (b *Broker) Serve(ln net.Listener) error {
	if !join(b, b.listeners, ln) {
		ln.Close()
		return ErrServerClosed
	}
	defer leave(b, b.listeners, ln)

	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if b.isClosing() {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors and the like: back off like
				// net/http instead of spinning or giving up.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		b.mu.Lock()
		if b.closing {
			b.mu.Unlock()
			nc.Close()
			return ErrServerClosed
		}
		b.wg.Add(1)
		b.mu.Unlock()
		go func() {
			defer b.wg.Done()
			b.handle(nc)
		}()
	}
}

func (b *Broker) isClosing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.closing
}

// stopAccepting closes every listener so Serve returns.
func (b *Broker) stopAccepting() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closing = true
	for ln := range b.listeners {
		ln.Close()
	}
}

// kickAll ends every connection, telling its sessions msg.
func (b *Broker) kickAll(msg string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for cc := range b.conns {
		cc.cancel(kick{msg})
	}
}

// Disconnect ends every connection to sandboxID, writing message to the
// stderr of its open sessions first (for example "sandbox deleted"), and
// forgets cached credentials for it. It returns how many connections it
// ended.
func (b *Broker) Disconnect(sandboxID, message string) int {
	if b.cache != nil {
		b.cache.Invalidate(sandboxID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for cc := range b.conns {
		if cc.sandboxID() == sandboxID {
			cc.cancel(kick{message})
			n++
		}
	}
	return n
}

// recheckTimeout bounds the Authorizer call Revoke makes for a sandbox.
const recheckTimeout = 5 * time.Second

// Revoke is told what control invalidated. For a sandbox that changed
// state (ended, suspended, restored) it forgets the cached credentials for
// it, so the next connection asks control afresh, and asks control about
// the sandbox once if connections to it are open: when it has ended, they
// are closed with the reason written to their sessions, rather than cut
// without one when the pod goes away under them. For a revoked token it
// asks control about the key of every open connection, and closes those
// whose key died with the token. Other kinds concern previews only.
func (b *Broker) Revoke(ctx context.Context, inv edgeapi.Invalidation) {
	switch {
	case inv.Kind == edgeapi.InvalidateSandbox && inv.SandboxID != "":
		b.revokeSandbox(ctx, inv.SandboxID)
	case inv.Kind == edgeapi.InvalidateToken:
		b.revokeKeys(ctx)
	}
}

func (b *Broker) revokeSandbox(ctx context.Context, sandboxID string) {
	if b.cache != nil {
		b.cache.Invalidate(sandboxID)
	}
	fp := ""
	b.mu.Lock()
	for cc := range b.conns {
		if cc.sandboxID() == sandboxID {
			// verified is written before sid is stored, and never again.
			fp = cc.verified
			break
		}
	}
	b.mu.Unlock()
	if fp == "" {
		return
	}
	// Any open connection's key will do: an ended sandbox refuses them all
	// alike. The cache is bypassed: it is what may be stale.
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	_, err := b.cfg.Authorizer.Authorize(ctx, sandboxID, fp)
	if !errors.Is(err, ErrSandboxEnded) {
		// Running, suspended or a control fault: open connections stay, as
		// they do past their credential's expiry.
		return
	}
	n := b.Disconnect(sandboxID, fmt.Sprintf("sbx: sandbox %s has ended; this connection is closed.", sandboxID))
	b.log.Info("sandbox ended; closed its connections", "sandbox_id", sandboxID, "connections", n)
}

// msgKeyRevoked is what a connection whose key died with its token is told.
const msgKeyRevoked = "sbx: the credential of this connection was revoked; this connection is closed."

// revokeChecks bounds the key checks revokeKeys has in flight at once.
const revokeChecks = 16

// revokeKeys asks control again about the key of each open connection
// (once per key, bypassing the cache) after a token was revoked: a key
// control no longer knows was minted by that token, and its connections
// end. The invalidation does not say which keys the token minted, so all
// are asked; revocations are rare. Any other answer, a control fault
// included, leaves the connections alone. The checks run side by side,
// all within one recheckTimeout: invalidations are applied one after
// another, and a slow or unreachable control must not hold the next one
// back for a timeout per open key.
func (b *Broker) revokeKeys(ctx context.Context) {
	type key struct{ sandboxID, fp string }
	b.mu.Lock()
	open := map[key][]*clientConn{}
	for cc := range b.conns {
		// verified is written before sid is stored, and never again.
		if sid := cc.sandboxID(); sid != "" && cc.verified != "" {
			k := key{sid, cc.verified}
			open[k] = append(open[k], cc)
		}
	}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(revokeChecks)
	for k, ccs := range open {
		g.Go(func() error {
			if _, err := b.cfg.Authorizer.Authorize(ctx, k.sandboxID, k.fp); !errors.Is(err, ErrUnknownKey) {
				return nil
			}
			if b.cache != nil {
				b.cache.Invalidate(k.sandboxID)
			}
			for _, cc := range ccs {
				cc.cancel(kick{msgKeyRevoked})
			}
			b.log.Info("credential revoked; closed its connections", "sandbox_id", k.sandboxID,
				"fingerprint", k.fp, "connections", len(ccs))
			return nil
		})
	}
	_ = g.Wait() // the checks return no error: a fault leaves connections open
}

// Shutdown stops accepting, lets open connections finish for up to
// DrainPeriod or until ctx is done, whichever is first, then closes the rest
// after telling their sessions why. It returns when every connection
// goroutine has returned; the error is ctx's if ctx ended the drain.
func (b *Broker) Shutdown(ctx context.Context) error {
	b.stopAccepting()
	idle := make(chan struct{})
	go func() {
		b.wg.Wait()
		close(idle)
	}()
	drain := time.NewTimer(b.cfg.DrainPeriod)
	defer drain.Stop()
	var err error
	select {
	case <-idle:
		return nil
	case <-drain.C:
	case <-ctx.Done():
		err = ctx.Err()
	}
	b.kickAll(msgShutdown)
	<-idle
	return err
}

// Close stops accepting and ends every connection at once.
func (b *Broker) Close() error {
	b.stopAccepting()
	b.kickAll(msgShutdown)
	b.wg.Wait()
	return nil
}

// join adds k to set (a listener or a connection), which b.mu guards, so
// Close and Shutdown can reach it; false means the broker is closing and
// k must not start.
func join[K comparable](b *Broker, set map[K]struct{}, k K) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		return false
	}
	set[k] = struct{}{}
	return true
}

// leave removes k that join added.
func leave[K comparable](b *Broker, set map[K]struct{}, k K) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(set, k)
}

func (b *Broker) newConnID() string {
	return "c" + strconv.FormatUint(b.nextID.Add(1), 10)
}
