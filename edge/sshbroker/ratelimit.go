package sshbroker

import (
	"net"
	"net/netip"
	"sync"

	"golang.org/x/time/rate"
)

// maxLimiterEntries bounds the per-source map so a spray of source addresses
// cannot grow it without limit; past it, sources whose bucket is full (who
// have nothing to remember) are forgotten first.
const maxLimiterEntries = 65536

// failLimiter is a token bucket of failed authentications per source.
// mu guards m.
type failLimiter struct {
	rate  rate.Limit
	burst int

	mu sync.Mutex
	m  map[netip.Prefix]*rate.Limiter
}

func newFailLimiter(r float64, burst int) *failLimiter {
	return &failLimiter{rate: rate.Limit(r), burst: burst, m: make(map[netip.Prefix]*rate.Limiter)}
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

// allowed reports whether src may still try to authenticate: it has at least
// one failure left in its bucket.
func (l *failLimiter) allowed(src net.Addr) bool {
	k, ok := sourceKey(src)
	if !ok {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	lim := l.m[k]
	return lim == nil || lim.Tokens() >= 1
}

// fail spends one token of src's bucket and reports whether it had one.
func (l *failLimiter) fail(src net.Addr) bool {
	k, ok := sourceKey(src)
	if !ok {
		return true
	}
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

func (l *failLimiter) sweepLocked() {
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
