package sshbroker

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
)

// maxLimiterEntries bounds each limiter's map so a spray of source
// addresses, users or keys cannot grow it without limit; past it, entries
// whose bucket is full (who have nothing to remember) are forgotten first.
const maxLimiterEntries = 65536

// Failed authentications are limited at two levels. A credential (source,
// user, offered key) that keeps failing is refused on its own, without
// touching anyone else behind the same address: a NAT or an office shares
// one source, and one client's stale key must not lock out the others.
// Every failure also spends the source's looser ceiling, which stops a
// flood that rotates users or keys; a source past it is cut before key
// exchange, the cheapest refusal.
type authLimits struct {
	cred   *failLimiter[credKey]
	source *failLimiter[netip.Prefix]
}

// credKey is one credential as offered from one source. fp is empty for
// failures that name no key (another method, a bad signature).
type credKey struct {
	source   netip.Prefix
	user, fp string
}

func newAuthLimits(cfg Config) *authLimits {
	return &authLimits{
		cred:   newFailLimiter[credKey](cfg.FailedAuthRate, cfg.FailedAuthBurst),
		source: newFailLimiter[netip.Prefix](cfg.SourceFailedAuthRate, cfg.SourceFailedAuthBurst),
	}
}

// sourceAllowed reports whether src may start a handshake: it has not
// spent its ceiling.
func (l *authLimits) sourceAllowed(src net.Addr) bool {
	k, ok := sourceKey(src)
	return !ok || l.source.allowed(k)
}

// credAllowed reports whether the credential may still be tried.
func (l *authLimits) credAllowed(src net.Addr, user, fp string) bool {
	k, ok := sourceKey(src)
	return !ok || l.cred.allowed(credKey{k, user, fp})
}

// fail spends one failure of the credential and of its source, and
// reports whether the source had one left. A spent credential is refused
// when next offered (credAllowed); the connection goes on, so a client
// whose agent offers a stale key before the good one still gets in.
func (l *authLimits) fail(src net.Addr, user, fp string) bool {
	k, ok := sourceKey(src)
	if !ok {
		return true
	}
	l.cred.fail(credKey{k, user, fp})
	return l.source.fail(k)
}

// sourceKey groups IPv6 sources by /64, since one host usually owns a whole
// /64 and would otherwise get unlimited buckets.
func sourceKey(addr net.Addr) (netip.Prefix, bool) {
	ap, err := netip.ParseAddrPort(addr.String())
	if err != nil {
		return netip.Prefix{}, false
	}
	ip := ap.Addr().Unmap()
	bits := 32
	if ip.Is6() {
		bits = 64
	}
	p, err := ip.Prefix(bits)
	return p, err == nil
}

// failLimiter is a token bucket of failures per key.
// mu guards m.
type failLimiter[K comparable] struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[K]*rate.Limiter
}

func newFailLimiter[K comparable](r float64, burst int) *failLimiter[K] {
	return &failLimiter[K]{rate: rate.Limit(r), burst: burst, m: make(map[K]*rate.Limiter)}
}

// allowed reports whether k has at least one failure left in its bucket.
func (l *failLimiter[K]) allowed(k K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[k]
	return lim == nil || lim.Tokens() >= 1
}

// fail spends one token of k's bucket and reports whether it had one.
func (l *failLimiter[K]) fail(k K) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[k]
	if lim == nil {
		if len(l.m) >= maxLimiterEntries {
			l.sweepLocked()
		}
		lim = rate.NewLimiter(l.rate, l.burst)
		l.m[k] = lim
	}
	return lim.Allow()
}

func (l *failLimiter[K]) sweepLocked() {
	for k, lim := range l.m {
		if lim.Tokens() >= float64(l.burst) {
			delete(l.m, k)
		}
	}
	// Still full: every entry is actively failing. Drop arbitrary ones
	// rather than grow; an attacker gains at most a fresh bucket.
	for k := range l.m {
		if len(l.m) < maxLimiterEntries {
			break
		}
		delete(l.m, k)
	}
}
