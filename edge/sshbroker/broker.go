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
	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/netlimit"
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

	// authz holds the authenticated connections by the authority they
	// ride on (their sandbox and key), for revocations to end.
	authz *authority.Registry[*clientConn]

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
		authz:      authority.New[*clientConn](nil),
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

	var (
		backoff netlimit.Backoff
		failing int // errors since the last connection accepted
	)
	for {
		nc, err := ln.Accept()
		if err != nil {
			if b.isClosing() {
				return ErrServerClosed
			}
			if netlimit.Temporary(err) {
				// Out of file descriptors and the like: back off like
				// net/http instead of spinning or giving up, with one
				// line per burst. A netlimit.Listener (the edge's) never
				// returns these; this is for a bare one.
				if failing++; failing == 1 {
					b.log.Error("accept failing; backing off and retrying", "err", err)
				}
				time.Sleep(backoff.Next())
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff.Reset()
		failing = 0
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
		cc.cancel(kick{msg: msg})
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
	n := 0
	for _, c := range b.authz.Match(authority.Key{Kind: authority.Sandbox, ID: sandboxID}) {
		if c.End(&authority.Ended{Reason: authority.ErrSandboxEnded, Detail: message}) {
			n++
		}
	}
	return n
}

// recheckTimeout bounds the Authorizer calls of one re-check.
const recheckTimeout = 5 * time.Second

// Revoke is told what control invalidated. For a sandbox that changed
// state (ended, suspended, restored) it forgets the cached credentials for
// it, so the next connection asks control afresh, and checks the keys of
// its open connections again: when it has ended, they are closed with the
// reason written to their sessions, rather than cut without one when the
// pod goes away under them. For a revoked token it checks the key of
// every open connection again, and closes those whose key died with the
// token: the invalidation names the token's account, and keys are not
// known by account here. Other kinds concern previews only.
func (b *Broker) Revoke(ctx context.Context, inv edgeapi.Invalidation) {
	switch {
	case inv.Kind == edgeapi.InvalidateSandbox && inv.SandboxID != "":
		if b.cache != nil {
			b.cache.Invalidate(inv.SandboxID)
		}
		b.recheck(ctx, b.authz.Invalidate(authority.Key{Kind: authority.Sandbox, ID: inv.SandboxID}))
	case inv.Kind == edgeapi.InvalidateToken:
		b.recheck(ctx, b.authz.Invalidate(authority.Key{Kind: authority.Credential}))
	case inv.Kind == edgeapi.InvalidateAll:
		// Invalidations were missed (Redis was away): any sandbox may
		// have ended and any token been revoked. Every open key is
		// checked again; the cache is what may be stale, so it goes.
		if b.cache != nil {
			b.cache.Clear()
		}
		b.recheck(ctx, b.authz.Invalidate(authority.Key{Kind: authority.Credential}))
	}
}

// msgKeyRevoked is what a connection whose key died with its token is told.
const msgKeyRevoked = "sbx: the credential of this connection was revoked; this connection is closed."

// recheckParallel bounds the key checks a re-check has in flight at once.
const recheckParallel = 16

// recheck asks control again about the key of each of conns (once per
// key, bypassing the cache: it is what may be stale) and ends the
// connections whose sandbox ended or whose key control no longer knows
// (minted by a revoked token). Any other answer, a suspended sandbox or a
// control fault included, leaves them open, as does their credential's
// expiry. The checks run side by side, all within one recheckTimeout:
// invalidations are applied one after another, and a slow or unreachable
// control must not hold the next one back for a timeout per open key.
func (b *Broker) recheck(ctx context.Context, conns []*authority.Conn[*clientConn]) {
	type key struct{ sandboxID, fp string }
	open := map[key][]*authority.Conn[*clientConn]{}
	for _, c := range conns {
		// route and verified are written during the handshake, before
		// the connection is registered, and never again.
		k := key{c.Value.route.SandboxID, c.Value.verified}
		open[k] = append(open[k], c)
	}
	ctx, cancel := context.WithTimeout(ctx, recheckTimeout)
	defer cancel()
	var g errgroup.Group
	g.SetLimit(recheckParallel)
	for k, cs := range open {
		g.Go(func() error {
			_, err := b.cfg.Authorizer.Authorize(ctx, k.sandboxID, k.fp)
			var end *authority.Ended
			switch {
			case errors.Is(err, ErrSandboxEnded):
				end = &authority.Ended{Reason: authority.ErrSandboxEnded,
					Detail: fmt.Sprintf("sbx: sandbox %s has ended; this connection is closed.", k.sandboxID)}
			case errors.Is(err, ErrUnknownKey):
				end = &authority.Ended{Reason: authority.ErrRevoked, Detail: msgKeyRevoked}
			default:
				return nil
			}
			if b.cache != nil {
				b.cache.Invalidate(k.sandboxID)
			}
			for _, c := range cs {
				c.End(end)
			}
			b.log.Info("authority ended; closed its connections", "sandbox_id", k.sandboxID,
				"fingerprint", k.fp, "reason", end.Reason, "connections", len(cs))
			return nil
		})
	}
	_ = g.Wait() // the checks return no error: a fault leaves connections open
}

// register enters an authenticated connection, whose key was checked at
// epoch, in the registry revocations look in, and checks it again if an
// invalidation came since (its check may have run before the connection
// was there to be found). The returned func unregisters it.
func (b *Broker) register(ctx context.Context, cc *clientConn, epoch uint64) func() {
	c, raced := b.authz.Register(epoch, authority.Registration[*clientConn]{
		Keys: []authority.Key{
			{Kind: authority.Sandbox, ID: cc.route.SandboxID},
			{Kind: authority.Credential, ID: cc.verified},
		},
		Value: cc,
		End:   func(cause error) { cc.cancel(kick{msg: endMessage(cause), why: cause}) },
	})
	if raced {
		b.recheck(ctx, []*authority.Conn[*clientConn]{c})
	}
	return func() { b.authz.Remove(c) }
}

// endMessage is what a connection's sessions are told when its
// authority ends.
func endMessage(cause error) string {
	var e *authority.Ended
	if errors.As(cause, &e) && e.Detail != "" {
		return e.Detail
	}
	return "sbx: " + cause.Error() + "; this connection is closed."
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
