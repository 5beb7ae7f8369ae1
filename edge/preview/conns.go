package preview

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/tick"
)

// Authority ends the connections that rode on it. Every relayed request
// is registered in the proxy's authority.Registry with what admitted it
// (its port and sandbox, and a token, a signed-in identity or the port
// being public). When control says something changed
// (Revoke, from the Redis invalidation channel or in-process in sbx dev),
// the affected connections are checked again with control, past every
// cache, and those no longer admitted are ended: a WebSocket gets a close
// frame with 1008 (policy violation) and a reason, a streaming response
// is cut. A periodic re-check of everything (Config.RecheckInterval) is
// the backstop for an invalidation that never arrived.

// statusPolicyViolation is the WebSocket close code for "your authority
// ended" (RFC 6455 §7.4.1).
const statusPolicyViolation = 1008

// devIssuer is the issuer of identities signed in by DevSignIn.
const devIssuer = "sbx-dev"

// upstreamEndCheck bounds the re-check of a WebSocket whose upstream
// ended on its own (see wsConn.upstreamEnded).
const upstreamEndCheck = 2 * time.Second

// recheckParallel bounds concurrent questions to control in one re-check.
const recheckParallel = 8

type grantKind int

const (
	grantPublic  grantKind = iota // the port was public
	grantToken                    // an account token
	grantSession                  // a preview cookie of a signed-in identity
	grantShare                    // a share link's cookie
)

// grant is what admitted a request.
type grant struct {
	kind   grantKind
	secret string   // grantToken: kept to ask control again; never logged
	id     Identity // grantSession
	share  Share    // grantShare
}

// liveConn is one relayed request, for as long as it is being served
// (and its WebSocket, if it upgraded, until the socket closes).
type liveConn struct {
	label  string
	route  Route
	grant  grant
	cancel context.CancelCauseFunc
	ws     atomic.Pointer[wsConn]
	// keyBuf holds the registration's keys (at most three): one
	// allocation per request fewer than a slice of their own.
	keyBuf [3]authority.Key
}

// conn is a relayed request as the proxy's registry (p.conns) holds it.
type conn = *authority.Conn[*liveConn]

// keys are the authorities a request admitted by g on rt rides on,
// appended to keys.
func (g grant) keys(keys []authority.Key, label string, rt Route) []authority.Key {
	keys = append(keys, authority.Key{Kind: authority.Port, ID: label}, authority.Key{Kind: authority.Sandbox, ID: rt.SandboxID})
	switch g.kind {
	case grantToken:
		keys = append(keys, authority.Key{Kind: authority.Token, ID: rt.AccountID})
	case grantSession:
		keys = append(keys, authority.Key{Kind: authority.Member, ID: rt.AccountID})
	case grantShare:
		keys = append(keys, authority.Key{Kind: authority.Share, ID: g.share.ID})
	}
	return keys
}

// expires is when g's authority lapses by itself (zero: never).
func (g grant) expires() time.Time {
	if g.kind == grantShare {
		return g.share.Expires
	}
	return time.Time{}
}

// sockets are the upgraded sockets not yet closed: the http.Server does
// not track hijacked connections, so Close must reach them itself.
type sockets struct {
	mu sync.Mutex // guards m
	m  map[*wsConn]struct{}
}

// track registers a request about to be relayed and returns the context
// to relay it with. ok is false when an invalidation that arrived since
// the request began (epoch) took its authority away.
func (p *Proxy) track(r *http.Request, label string, rt Route, g grant, epoch uint64) (context.Context, conn, bool) {
	ctx, cancel := context.WithCancelCause(r.Context())
	lc := &liveConn{label: label, route: rt, grant: g, cancel: cancel}
	c, raced := p.conns.Register(epoch, authority.Registration[*liveConn]{
		Keys: g.keys(lc.keyBuf[:0], label, rt), Value: lc, Expires: g.expires(),
		End: func(cause error) { p.end(lc, cause) },
	})
	if raced {
		p.recheck(ctx, []conn{c})
		if c.Cause() != nil {
			p.untrack(c)
			return nil, nil, false
		}
	}
	return ctx, c, true
}

func (p *Proxy) untrack(c conn) {
	p.conns.Remove(c)
	c.Value.cancel(nil)
}

// end ends lc because its authority went (the registry calls it once):
// a WebSocket gets a close frame saying why, then its request ends.
func (p *Proxy) end(lc *liveConn, cause error) {
	reason := endReason(cause)
	p.log.Info("preview connection ended: authority gone", "sandbox_id", lc.route.SandboxID, "label", lc.label, "reason", reason)
	if ws := lc.ws.Load(); ws != nil {
		ws.revoke(statusPolicyViolation, reason) // cancels once the frame is out
		return
	}
	lc.cancel(cause)
}

// endReason is what a client is told of cause: a WebSocket's close
// reason.
func endReason(cause error) string {
	var e *authority.Ended
	if errors.As(cause, &e) && e.Detail != "" {
		return e.Detail
	}
	if errors.Is(cause, authority.ErrExpired) {
		return "share link expired" // the only authority with a lifetime here
	}
	return cause.Error()
}

// Revoke applies an invalidation from control: it drops what the proxy
// cached about it and checks the connections it concerns again, ending
// those no longer admitted. It returns once they are checked (each
// WebSocket's close frame is on its way). Safe for concurrent use.
func (p *Proxy) Revoke(ctx context.Context, inv edgeapi.Invalidation) {
	var affected []conn
	switch inv.Kind {
	case edgeapi.InvalidatePort:
		p.routes.Invalidate(inv.Label)
		affected = p.conns.Invalidate(authority.Key{Kind: authority.Port, ID: inv.Label})
	case edgeapi.InvalidateSandbox:
		p.routes.invalidateSandbox(inv.SandboxID)
		affected = p.conns.Invalidate(authority.Key{Kind: authority.Sandbox, ID: inv.SandboxID})
	case edgeapi.InvalidateToken:
		affected = p.conns.Invalidate(authority.Key{Kind: authority.Token, ID: inv.AccountID})
	case edgeapi.InvalidateShare:
		p.shares.drop(inv.ShareID)
		affected = p.conns.Invalidate(authority.Key{Kind: authority.Share, ID: inv.ShareID})
	case edgeapi.InvalidateMembers:
		p.members.clear()
		affected = p.conns.Invalidate(authority.Key{Kind: authority.Member, ID: inv.AccountID})
	case edgeapi.InvalidateAll:
		p.routes.clear()
		p.members.clear()
		affected = p.conns.InvalidateAll()
	default:
		// A kind from a newer control: check everything rather than miss
		// what it meant.
		p.log.Warn("unknown preview invalidation; re-checking every connection", "kind", inv.Kind)
		affected = p.conns.InvalidateAll()
	}
	p.recheck(ctx, affected)
}

// recheckLoop re-checks every connection each interval until ctx ends.
func (p *Proxy) recheckLoop(ctx context.Context, every time.Duration) {
	tick.Every(ctx, every, func() bool {
		p.pool.prune()
		all := p.conns.All()
		if len(all) == 0 {
			return true
		}
		rctx, cancel := context.WithTimeout(ctx, every)
		p.recheck(rctx, all)
		cancel()
		return true
	})
}

// recheck asks control again, once per distinct label, token and
// identity, and ends the connections no longer admitted. A control fault
// ends nothing: an answer that could not be had is not a "no", and the
// next re-check tries again.
func (p *Proxy) recheck(ctx context.Context, conns []conn) {
	if len(conns) == 0 {
		return
	}
	type answer struct {
		route  Route
		acct   string
		member bool
		err    error
	}
	// The distinct questions first; then each is asked once, writing
	// only its own answer.
	routes := map[string]*answer{}
	tokens := map[string]*answer{}
	members := map[memberKey]*answer{}
	shares := map[string]*answer{}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(recheckParallel)
	for _, c := range conns {
		lc := c.Value
		if _, ok := routes[lc.label]; !ok {
			a := &answer{}
			routes[lc.label] = a
			g.Go(func() error {
				p.routes.Invalidate(lc.label)
				a.route, a.err = p.routes.get(gctx, lc.label)
				return nil
			})
		}
		switch lc.grant.kind {
		case grantToken:
			if _, ok := tokens[lc.grant.secret]; !ok {
				a := &answer{}
				tokens[lc.grant.secret] = a
				g.Go(func() error {
					a.acct, a.err = p.cfg.Accounts.TokenAccount(gctx, lc.grant.secret)
					return nil
				})
			}
		case grantShare:
			if _, ok := shares[lc.grant.share.ID]; !ok {
				a := &answer{}
				shares[lc.grant.share.ID] = a
				g.Go(func() error {
					_, a.err = p.shares.fresh(gctx, p.cfg.Shares, lc.label, lc.grant.share.ID)
					return nil
				})
			}
		case grantSession:
			k := newMemberKey(lc.grant.id, lc.route.AccountID)
			if _, ok := members[k]; !ok {
				a := &answer{}
				members[k] = a
				g.Go(func() error {
					a.member, a.err = p.memberFresh(gctx, lc.grant.id, lc.route.AccountID)
					return nil
				})
			}
		}
	}
	_ = g.Wait()
	for _, c := range conns {
		lc := c.Value
		ra := routes[lc.label]
		var why error = authority.ErrRevoked
		var reason string
		var fault error
		switch rt := ra.route; {
		case errors.Is(ra.err, ErrUnknownHost):
			why, reason = authority.ErrPortUnexposed, "preview removed: the port was unexposed or the sandbox ended"
		case ra.err != nil:
			fault = ra.err
		case rt.SandboxID != lc.route.SandboxID || rt.AccountID != lc.route.AccountID || rt.Port != lc.route.Port:
			reason = "preview host now leads elsewhere"
		case !rt.Ready:
			why, reason = authority.ErrSandboxEnded, "sandbox is no longer running"
		case rt.Public:
			// Anyone may connect to a public port.
		case lc.grant.kind == grantPublic:
			reason = "preview is no longer public"
		case lc.grant.kind == grantToken:
			ta := tokens[lc.grant.secret]
			switch {
			case errors.Is(ta.err, ErrInvalidToken):
				reason = "token revoked or expired"
			case ta.err != nil:
				fault = ta.err
			case ta.acct != rt.AccountID:
				reason = "token no longer admits this preview"
			}
		case lc.grant.kind == grantShare:
			switch sa := shares[lc.grant.share.ID]; {
			case errors.Is(sa.err, ErrShareRevoked):
				reason = "share link revoked"
			case errors.Is(sa.err, ErrShareExpired):
				why, reason = authority.ErrExpired, "share link expired"
			case errors.Is(sa.err, ErrShareUnknown):
				reason = "share link no longer opens this preview"
			case sa.err != nil:
				fault = sa.err
			}
		case lc.grant.kind == grantSession:
			ma := members[newMemberKey(lc.grant.id, lc.route.AccountID)]
			switch {
			case ma.err != nil:
				fault = ma.err
			case !ma.member:
				reason = "no longer a member of the preview's account"
			}
		}
		if fault != nil {
			p.log.Warn("re-check of preview connection failed; kept until the next", "sandbox_id", lc.route.SandboxID, "label", lc.label, "err", fault)
			continue
		}
		if reason != "" {
			c.End(&authority.Ended{Reason: why, Detail: reason})
		}
	}
}

// closeConns force-closes every upgraded socket still open (the
// http.Server does not track hijacked connections) and ends every
// tracked request.
func (p *Proxy) closeConns() {
	p.sockets.mu.Lock()
	ws := make([]*wsConn, 0, len(p.sockets.m))
	for c := range p.sockets.m {
		ws = append(ws, c)
	}
	p.sockets.mu.Unlock()
	for _, c := range ws {
		_ = c.forceClose()
	}
	for _, c := range p.conns.All() {
		c.Value.cancel(errProxyClosed)
	}
	p.conns.Close()
}

// errProxyClosed is the cause of the requests Close ends.
var errProxyClosed = errors.New("preview: proxy closed")

// hijackWriter hands the ReverseProxy a wsConn instead of the raw socket
// when it hijacks for a WebSocket upgrade.
type hijackWriter struct {
	http.ResponseWriter
	p *Proxy
	c conn
}

func (h *hijackWriter) Unwrap() http.ResponseWriter { return h.ResponseWriter }

func (h *hijackWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	conn, brw, err := http.NewResponseController(h.ResponseWriter).Hijack()
	if err != nil {
		return nil, nil, err
	}
	lc := h.c.Value
	ws := &wsConn{Conn: conn, cancel: func() { lc.cancel(h.c.Cause()) }}
	ws.upstreamEnded = func() {
		// Bounded: the ReverseProxy waits on this before closing.
		ctx, cancel := context.WithTimeout(context.Background(), upstreamEndCheck)
		defer cancel()
		h.p.recheck(ctx, []*authority.Conn[*liveConn]{h.c})
	}
	s := &h.p.sockets
	ws.done = func() {
		s.mu.Lock()
		delete(s.m, ws)
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.m[ws] = struct{}{}
	s.mu.Unlock()
	lc.ws.Store(ws)
	// A revoke between registration and now found no socket to close.
	if cause := h.c.Cause(); cause != nil {
		ws.revoke(statusPolicyViolation, endReason(cause))
	}
	return ws, brw, nil
}

// memberKey names one membership question.
type memberKey struct {
	account, issuer, subject, email string
	verified                        bool
}

func newMemberKey(id Identity, account string) memberKey {
	return memberKey{account: account, issuer: id.Issuer, subject: id.Subject, email: strings.ToLower(id.Email), verified: id.EmailVerified}
}

// memberCache remembers membership answers for a short while, so each
// request with a preview cookie is checked against the members file
// without asking control every time. Revoke of kind members clears it.
type memberCache struct {
	ttl time.Duration
	now func() time.Time
	max int

	mu      sync.Mutex // guards entries
	entries map[memberKey]memberEntry
}

type memberEntry struct {
	ok      bool
	expires time.Time
}

func (c *memberCache) get(k memberKey) (ok, found bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, found := c.entries[k]
	if !found || !c.now().Before(e.expires) {
		return false, false
	}
	return e.ok, true
}

func (c *memberCache) put(k memberKey, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.entries) >= c.max {
		clear(c.entries) // bounded, and rare
	}
	c.entries[k] = memberEntry{ok: ok, expires: c.now().Add(c.ttl)}
}

func (c *memberCache) clear() {
	c.mu.Lock()
	clear(c.entries)
	c.mu.Unlock()
}

// member reports whether id still belongs to account, from the cache
// when it can. The dev sign-in's user belongs to the dev account only.
func (p *Proxy) member(ctx context.Context, id Identity, account string) (bool, error) {
	if ok, dev := p.devMember(id, account); dev {
		return ok, nil
	}
	k := newMemberKey(id, account)
	if ok, found := p.members.get(k); found {
		return ok, nil
	}
	return p.memberFresh(ctx, id, account)
}

// memberFresh asks control, past the cache, and caches the answer.
func (p *Proxy) memberFresh(ctx context.Context, id Identity, account string) (bool, error) {
	if ok, dev := p.devMember(id, account); dev {
		return ok, nil
	}
	ok, err := p.cfg.Accounts.Member(ctx, id, account)
	if err != nil {
		return false, err
	}
	p.members.put(newMemberKey(id, account), ok)
	return ok, nil
}

func (p *Proxy) devMember(id Identity, account string) (ok, dev bool) {
	if p.cfg.DevSignIn == nil || id.Issuer != devIssuer {
		return false, false
	}
	return account == p.cfg.DevSignIn.AccountID, true
}
