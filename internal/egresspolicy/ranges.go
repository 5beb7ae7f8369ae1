package egresspolicy

import (
	"fmt"
	"net/netip"
)

// refusedRange is an address range no sandbox reaches unless the
// operator trusts it, with the words a refusal uses for it.
type refusedRange struct {
	prefix netip.Prefix
	what   string
}

// alwaysRefused are the ranges that are never the public internet: this
// host, the networks it sits on and the cloud's own services. The order
// matters only for the words: Check names the metadata endpoints first,
// then the cluster's ranges, then these.
var alwaysRefused = []refusedRange{
	{netip.MustParsePrefix("0.0.0.0/8"), "an unspecified (\"this network\") address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address (RFC 1918)"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT address (RFC 6598)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fc00::/7"), "a unique local IPv6 address"},
	{netip.MustParsePrefix("fe80::/10"), "a link-local address"},
	{netip.MustParsePrefix("fec0::/10"), "a site-local IPv6 address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
}

// metadata are the cloud metadata endpoints, named before any other
// range that holds them.
var metadata = []refusedRange{
	{netip.MustParsePrefix("169.254.169.254/32"), "the cloud metadata endpoint"},
	{netip.MustParsePrefix("fd00:ec2::254/128"), "the cloud metadata endpoint"},
}

// nat64 is the well-known NAT64 prefix; its addresses carry an IPv4
// address in their last 32 bits, which a NAT64 gateway would reach.
var nat64 = netip.MustParsePrefix("64:ff9b::/96")

// Ranges decides which addresses the gateway may dial whatever the
// policy: the always-refused ranges and the cluster's own (both unless
// trusted), and the product's own listeners (never). Build it with
// NewRanges; it is immutable and safe for concurrent use.
type Ranges struct {
	cluster []netip.Prefix
	trust   []netip.Prefix
	own     []netip.AddrPort
}

// RangesConfig configures Ranges.
type RangesConfig struct {
	// Cluster are the cluster's pod and service ranges (and any other
	// internal range of the deployment); refused like RFC 1918.
	Cluster []netip.Prefix
	// Trust are ranges the operator opens for known upstreams (a
	// package mirror, a test server on loopback). They unlock the
	// refused and cluster ranges they overlap, never Own.
	Trust []netip.Prefix
	// Own are the product's own listeners (API, internal API, metrics,
	// Redis, Postgres, the gateway itself). A listener on an
	// unspecified address (0.0.0.0:6379, [::]:6379) stands for its port
	// on every address that is not public, since it answers there.
	Own []netip.AddrPort
}

// NewRanges checks c and builds its Ranges.
func NewRanges(c RangesConfig) (*Ranges, error) {
	for i, p := range c.Cluster {
		if !p.IsValid() || p != p.Masked() {
			return nil, fmt.Errorf("cluster range %d (%s) is not a valid masked CIDR", i, p)
		}
	}
	for i, p := range c.Trust {
		if !p.IsValid() || p != p.Masked() {
			return nil, fmt.Errorf("trusted range %d (%s) is not a valid masked CIDR", i, p)
		}
	}
	for i, ap := range c.Own {
		if !ap.IsValid() || ap.Port() == 0 {
			return nil, fmt.Errorf("own listener %d (%s) has no address or port", i, ap)
		}
	}
	r := &Ranges{}
	for _, p := range c.Cluster {
		r.cluster = append(r.cluster, unmapPrefix(p))
	}
	for _, p := range c.Trust {
		r.trust = append(r.trust, unmapPrefix(p))
	}
	for _, ap := range c.Own {
		r.own = append(r.own, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()))
	}
	return r, nil
}

func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// Check says why the gateway must not dial ap, or "" when it may. The
// words name the address and the kind of range ("10.0.0.5 is a private
// address (RFC 1918)").
func (r *Ranges) Check(ap netip.AddrPort) string {
	addr := ap.Addr().Unmap()
	if !addr.IsValid() {
		return "not an address"
	}
	if addr.Zone() != "" {
		return fmt.Sprintf("%s has an IPv6 zone", addr)
	}
	for _, o := range r.own {
		if o.Port() != ap.Port() {
			continue
		}
		if o.Addr() == addr || (o.Addr().IsUnspecified() && r.internal(addr) != "") {
			return fmt.Sprintf("%s is one of sbx's own listeners", netip.AddrPortFrom(addr, ap.Port()))
		}
	}
	what := r.internal(addr)
	if what == "" {
		return ""
	}
	for _, t := range r.trust {
		if t.Contains(addr) {
			return ""
		}
	}
	return fmt.Sprintf("%s is %s", addr, what)
}

// internal names the refused range addr lies in, or "" for a public
// address. An address that embeds an IPv4 one (NAT64) is judged by it.
func (r *Ranges) internal(addr netip.Addr) string {
	for _, rr := range metadata {
		if rr.prefix.Contains(addr) {
			return rr.what
		}
	}
	for _, c := range r.cluster {
		if c.Contains(addr) {
			return "in the cluster's internal ranges"
		}
	}
	for _, rr := range alwaysRefused {
		if rr.prefix.Contains(addr) {
			return rr.what
		}
	}
	if nat64.Contains(addr) {
		b := addr.As16()
		v4 := netip.AddrFrom4([4]byte(b[12:16]))
		if what := r.internal(v4); what != "" {
			return what + " behind NAT64"
		}
	}
	return ""
}

// Trusted reports whether addr is in a refused range the operator
// trusts (--egress-trust): the only place a plain-HTTP credential
// upstream may be, since the secret it carries would cross the network
// in the clear anywhere else.
func (r *Ranges) Trusted(addr netip.Addr) bool {
	addr = addr.Unmap()
	if r.internal(addr) == "" {
		return false
	}
	for _, t := range r.trust {
		if t.Contains(addr) {
			return true
		}
	}
	return false
}
