// Package authority keeps the promise "every connection an authority
// admitted ends when that authority ends", once for every surface: the
// SSH broker's connections, the preview proxy's requests and WebSockets,
// and control's API streams register here with what admitted them (a
// sandbox, a port, a credential, a token, ...) and, when that authority
// has a lifetime, when it expires.
//
// A Registry does not decide whether an authority is gone: the surface
// asks its source of truth (control, the store) about the connections an
// invalidation names, and ends those no longer admitted. What the
// Registry owns is the bookkeeping every surface would otherwise copy:
// finding the connections a key names, the epoch that lets a revocation
// racing a registration still win, a cause that says why a connection
// ended, and expiry, run on one timer per Registry rather than one
// goroutine per connection.
package authority

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"
)

// Kind names what a key stands for.
type Kind string

// The kinds of authority a connection can ride on.
const (
	// Sandbox: the connection reaches into the sandbox, and ends with it.
	Sandbox Kind = "sandbox"
	// Port: a preview host (its label); unexposing the port ends it.
	Port Kind = "port"
	// Credential: an SSH key (its fingerprint).
	Credential Kind = "credential"
	// Token: an account token. The ID is the token's account, not the
	// token: revocations are published by account (the edge knows tokens
	// only by the secrets it was shown, and never keeps those as keys).
	Token Kind = "token"
	// Member: a signed-in identity's membership of an account (the ID).
	Member Kind = "member"
	// Share: a share link.
	Share Kind = "share"
	// Egress: a sandbox's egress credential.
	Egress Kind = "egress"
)

// Key names one authority. An empty ID in a lookup (Invalidate, Match)
// names every key of its kind.
type Key struct {
	Kind Kind
	ID   string
}

// Why a connection ended, as the Reason of an Ended cause.
var (
	ErrRevoked          = errors.New("authority revoked")
	ErrExpired          = errors.New("authority expired")
	ErrSandboxEnded     = errors.New("sandbox ended")
	ErrSandboxSuspended = errors.New("sandbox suspended")
	ErrPortUnexposed    = errors.New("port unexposed")
)

// Ended is the cause of a connection ended because its authority went:
// Reason is one of the errors above (errors.Is matches it), Detail what
// the user is told.
type Ended struct {
	Reason error
	Detail string
}

func (e *Ended) Error() string {
	if e.Detail == "" {
		return e.Reason.Error()
	}
	return e.Reason.Error() + ": " + e.Detail
}

func (e *Ended) Unwrap() error { return e.Reason }

// Cause reports the Ended cause of ctx, if that is why ctx ended.
func Cause(ctx context.Context) (*Ended, bool) {
	var e *Ended
	ok := errors.As(context.Cause(ctx), &e)
	return e, ok
}

// Registration is what a connection registers with.
type Registration[T any] struct {
	// Keys are the authorities the connection rides on.
	Keys []Key
	// Expires, when not zero, is when the authority lapses (a token's or
	// ticket's expiry): the Registry ends the connection then with an
	// Ended cause of Reason ErrExpired.
	Expires time.Time
	// Value is the surface's own record of the connection.
	Value T
	// End ends the connection with cause (typically its context's
	// CancelCauseFunc, or a close frame first). The Registry calls it at
	// most once, never with its lock held.
	End func(cause error)
}

// Conn is one registered connection.
type Conn[T any] struct {
	// Value is Registration.Value.
	Value T

	keys    []Key
	expires time.Time
	end     func(error)
	cause   atomic.Pointer[error] // set once, by the first End

	// Guarded by the Registry's mu.
	heapIdx int // in the expiry heap; -1 when not there
	removed bool
}

// End ends c with cause, unless it has ended already; it reports whether
// this call ended it. The connection stays registered until Remove, so
// its owner can still find it while it winds down.
func (c *Conn[T]) End(cause error) bool {
	if cause == nil {
		cause = context.Canceled
	}
	if !c.cause.CompareAndSwap(nil, &cause) {
		return false
	}
	if c.end != nil {
		c.end(cause)
	}
	return true
}

// Cause is the cause c was ended with, or nil while it is live.
func (c *Conn[T]) Cause() error {
	if p := c.cause.Load(); p != nil {
		return *p
	}
	return nil
}

// Expires is Registration.Expires.
func (c *Conn[T]) Expires() time.Time { return c.expires }

// Has reports whether c rides on k (an empty k.ID: on any key of k.Kind).
func (c *Conn[T]) Has(k Key) bool {
	for _, ck := range c.keys {
		if ck.Kind == k.Kind && (k.ID == "" || ck.ID == k.ID) {
			return true
		}
	}
	return false
}

// Registry is the set of live connections of one surface. It is safe for
// concurrent use. A lookup scans every connection: invalidations are rare
// next to connections, and a scan of 100,000 takes about a millisecond.
type Registry[T any] struct {
	now   func() time.Time
	epoch atomic.Uint64

	mu     sync.Mutex // guards everything below and each Conn's heapIdx and removed
	conns  map[*Conn[T]]struct{}
	expiry expiryHeap[T]
	timer  *time.Timer // fires at expiry[0]'s time; nil until needed
	closed bool
}

// New returns an empty Registry. now is its clock (time.Now when nil); an
// expiry is due once now reaches it.
func New[T any](now func() time.Time) *Registry[T] {
	if now == nil {
		now = time.Now
	}
	return &Registry[T]{now: now, conns: map[*Conn[T]]struct{}{}}
}

// Epoch is the count of invalidations so far. A surface reads it before
// it checks a connection's authority and hands it to Register.
func (r *Registry[T]) Epoch() uint64 { return r.epoch.Load() }

// Register adds a connection whose authority was checked at epoch. raced
// is true when an invalidation came since: the connection is registered,
// but the surface must check it again as it would on that invalidation
// (and refuse it if that ends it), since the invalidation's own check may
// have run before the connection was there to be found. A Registration
// already past its expiry is ended at once.
func (r *Registry[T]) Register(epoch uint64, reg Registration[T]) (c *Conn[T], raced bool) {
	c = &Conn[T]{Value: reg.Value, keys: reg.Keys, expires: reg.Expires, end: reg.End, heapIdx: -1}
	r.mu.Lock()
	r.conns[c] = struct{}{}
	due := false
	if !c.expires.IsZero() {
		if due = !r.now().Before(c.expires); !due {
			r.expiry.push(c)
			r.scheduleLocked()
		}
	}
	r.mu.Unlock()
	if due {
		c.End(&Ended{Reason: ErrExpired})
	}
	return c, r.epoch.Load() != epoch
}

// Remove unregisters c; it is idempotent. It does not end c.
func (r *Registry[T]) Remove(c *Conn[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c.removed {
		return
	}
	c.removed = true
	delete(r.conns, c)
	if c.heapIdx >= 0 {
		r.expiry.remove(c.heapIdx)
		r.scheduleLocked()
	}
}

// Invalidate records an invalidation of k and returns the live
// connections riding on it, for the surface to check again.
func (r *Registry[T]) Invalidate(k Key) []*Conn[T] {
	r.epoch.Add(1)
	return r.Match(k)
}

// InvalidateAll records an invalidation whose reach is unknown (a kind
// from a newer control) and returns every live connection.
func (r *Registry[T]) InvalidateAll() []*Conn[T] {
	r.epoch.Add(1)
	return r.All()
}

// Match returns the live connections riding on k.
func (r *Registry[T]) Match(k Key) []*Conn[T] {
	return r.Select(func(c *Conn[T]) bool { return c.Has(k) })
}

// All returns every live connection.
func (r *Registry[T]) All() []*Conn[T] {
	return r.Select(func(*Conn[T]) bool { return true })
}

// Select returns the live (registered, not ended) connections f keeps. f
// runs with the Registry's lock held and must not call back into it.
func (r *Registry[T]) Select(f func(*Conn[T]) bool) []*Conn[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*Conn[T]
	for c := range r.conns {
		if c.cause.Load() == nil && f(c) {
			out = append(out, c)
		}
	}
	return out
}

// Len is the number of registered connections, ended ones included.
func (r *Registry[T]) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.conns)
}

// Close stops the expiry timer; no connection expires after it returns.
// It ends nothing: each surface ends its connections as it shuts down.
func (r *Registry[T]) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.timer != nil {
		r.timer.Stop()
	}
}

// scheduleLocked sets the timer for the earliest expiry. r.mu is held.
func (r *Registry[T]) scheduleLocked() {
	if r.closed {
		return
	}
	if len(r.expiry) == 0 {
		if r.timer != nil {
			r.timer.Stop()
		}
		return
	}
	d := r.expiry[0].expires.Sub(r.now())
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.expire)
		return
	}
	r.timer.Reset(d)
}

// expire ends every connection whose expiry is due, and sets the timer
// for the next.
func (r *Registry[T]) expire() {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return
	}
	now := r.now()
	var due []*Conn[T]
	for len(r.expiry) > 0 && !now.Before(r.expiry[0].expires) {
		due = append(due, r.expiry.pop())
	}
	r.scheduleLocked()
	r.mu.Unlock()
	for _, c := range due {
		c.End(&Ended{Reason: ErrExpired})
	}
}
