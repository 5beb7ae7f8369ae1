package egresspolicy

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Target is a destination as a client asked for it: a normalised name
// or an IP literal, and a port.
type Target struct {
	Name string     // lower case, no trailing dot; empty when Addr is set
	Addr netip.Addr // set for an IP literal (unmapped)
	Port uint16
}

// ParseTarget reads a requested host (as in a CONNECT authority or a
// Host header, without the port) and port.
func ParseTarget(host string, port uint16) (Target, error) {
	if port == 0 {
		return Target{}, fmt.Errorf("port 0")
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(h); err == nil {
		if a.Zone() != "" {
			return Target{}, fmt.Errorf("address %q has an IPv6 zone", host)
		}
		return Target{Addr: a.Unmap(), Port: port}, nil
	}
	name, err := normalName(host)
	if err != nil {
		return Target{}, fmt.Errorf("host %q: %w", host, err)
	}
	if strings.Contains(name, "*") {
		return Target{}, fmt.Errorf("host %q has a \"*\"", host)
	}
	return Target{Name: name, Port: port}, nil
}

// String is host:port, IPv6 in brackets.
func (t Target) String() string {
	return t.Host() + ":" + strconv.Itoa(int(t.Port))
}

// Host is the name or the address.
func (t Target) Host() string {
	if t.Name != "" {
		return t.Name
	}
	if t.Addr.Is6() {
		return "[" + t.Addr.String() + "]"
	}
	return t.Addr.String()
}

// AllowsTarget reports whether the policy lets a client ask for t at
// all: open does, none does not, an allowlist does when a name entry
// matches t's name or an IP entry holds t's literal address. For a name
// that no name entry matches, an allowlist with IP entries may still
// let the resolved address through: see AllowsAddr.
func (p *Policy) AllowsTarget(t Target) bool {
	switch p.mode {
	case Open:
		return true
	case None:
		return false
	}
	for _, e := range p.entries {
		if e.matchesTarget(t) {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether an allowlist's IP entries hold addr on
// port; it is how a name that matches no name entry may still be
// reached, by the address it resolves to. Open allows every address,
// none none. It says nothing about the refused ranges.
func (p *Policy) AllowsAddr(addr netip.Addr, port uint16) bool {
	switch p.mode {
	case Open:
		return true
	case None:
		return false
	}
	addr = addr.Unmap()
	for _, e := range p.entries {
		if e.name == "" && e.portOK(port) && e.prefix.Contains(addr) {
			return true
		}
	}
	return false
}

// HasAddrEntries reports whether the allowlist has IP entries, that is
// whether resolving a name no name entry matches can still lead to an
// allowed address. Without any, the gateway refuses such a name without
// asking DNS about it.
func (p *Policy) HasAddrEntries() bool {
	for _, e := range p.entries {
		if e.name == "" {
			return true
		}
	}
	return false
}

// Allows reports whether the policy lets t be reached at addr, the
// address the gateway is about to dial: the target matches, or the
// address does.
func (p *Policy) Allows(t Target, addr netip.Addr) bool {
	return p.AllowsTarget(t) || p.AllowsAddr(addr, t.Port)
}

func (e Entry) portOK(port uint16) bool { return e.port == 0 || e.port == port }

func (e Entry) matchesTarget(t Target) bool {
	if !e.portOK(t.Port) {
		return false
	}
	if t.Name == "" {
		return e.name == "" && e.prefix.Contains(t.Addr)
	}
	if e.name == "" {
		return false
	}
	if e.wildcard {
		return strings.HasSuffix(t.Name, "."+e.name)
	}
	return t.Name == e.name
}

// covers reports whether every request e matches is also matched by p
// (the parent entry), judged on the entries alone.
func (p Entry) covers(e Entry) bool {
	if p.port != 0 && p.port != e.port {
		return false
	}
	switch {
	case e.name == "":
		return p.name == "" && p.prefix.Bits() <= e.prefix.Bits() && p.prefix.Contains(e.prefix.Addr())
	case p.name == "":
		// A name's addresses are not known ahead, so an IP entry
		// cannot be said to hold it.
		return false
	case e.wildcard:
		return p.wildcard && (e.name == p.name || strings.HasSuffix(e.name, "."+p.name))
	case p.wildcard:
		return strings.HasSuffix(e.name, "."+p.name)
	default:
		return e.name == p.name
	}
}

// Narrows checks that child allows nothing parent does not: none
// narrows everything, everything narrows open, and an allowlist narrows
// an allowlist when each of its entries is covered by one of the
// parent's. The error is an *Error naming the first entry (or the mode)
// that widens, with what the parent allows.
func Narrows(child, parent *Policy) error {
	switch {
	case child.mode == None || parent.mode == Open:
		return nil
	case parent.mode == None:
		return fieldErr("egress", "%q widens the profile's policy, which allows no egress", child.mode)
	case child.mode == Open:
		return fieldErr("egress", "\"open\" widens the profile's allowlist (%s)", parent.describe())
	}
	for i, e := range child.entries {
		covered := false
		for _, pe := range parent.entries {
			if pe.covers(e) {
				covered = true
				break
			}
		}
		if !covered {
			return fieldErr(fmt.Sprintf("allow[%d]", i), "%q is not within the profile's allowlist (%s)", e.raw, parent.describe())
		}
	}
	return nil
}

// Refusal says in words why the policy refuses t, for the person or
// agent reading a proxy error: "example.com is not in this sandbox's
// allowlist; allowed: github.com, *.npmjs.org:443".
func (p *Policy) Refusal(t Target) string {
	switch p.mode {
	case None:
		return fmt.Sprintf("%s: this sandbox's network policy allows no egress", t.Host())
	case Allowlist:
		return fmt.Sprintf("%s is not in this sandbox's allowlist; allowed: %s", t, p.describe())
	}
	return ""
}

// describe lists the allowlist, or says it is empty.
func (p *Policy) describe() string {
	if len(p.entries) == 0 {
		return "nothing"
	}
	return strings.Join(p.Entries(), ", ")
}
