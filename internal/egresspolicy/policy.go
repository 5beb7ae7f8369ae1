// Package egresspolicy is a sandbox's network policy: which destinations
// code inside the sandbox may open through the egress gateway, and which
// addresses no policy can ever reach.
//
// A policy has a mode and, in allowlist mode, a list of entries:
//
//   - "open": every destination outside the refused ranges (see Ranges).
//   - "allowlist": only destinations that match an entry.
//   - "none": nothing at all.
//
// An entry is one of
//
//   - a host name, "github.com": that name only, not its subdomains.
//     Names compare case-insensitively and a trailing dot is ignored.
//   - a wildcard, "*.npmjs.org": every name with at least one more label
//     in front ("registry.npmjs.org", "a.b.npmjs.org"), not "npmjs.org"
//     itself. The "*." must be the whole leftmost label and appear once.
//   - an IP literal or CIDR, "203.0.113.7", "2001:db8::/32": a request
//     for an IP literal inside it, and a request for a name that matches
//     no name entry whose resolved address the gateway dials lies inside
//     it (the gateway checks the address it dials, so a CIDR entry
//     never lets a name reach anything outside the CIDR).
//
// Each entry may end in ":port" ("*.npmjs.org:443", "[2001:db8::1]:22",
// "10.1.0.0/16:5432"); without one it allows every port. Names are
// matched as given by the client (CONNECT authority or Host), before any
// resolution: a name entry never matches an IP literal and vice versa.
//
// Whatever the policy says, the gateway refuses addresses in Ranges'
// refused set (loopback, private, link-local, ...) unless the operator
// trusts them, and the product's own listeners always.
package egresspolicy

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Mode is a policy's kind.
type Mode string

// The modes a policy may have.
const (
	Open      Mode = "open"
	Allowlist Mode = "allowlist"
	None      Mode = "none"
)

// MaxEntries bounds one policy's list; a policy is checked on every
// request, and a list longer than this is a sign of a mistake.
const MaxEntries = 256

// maxEntryLen bounds one entry (a DNS name is at most 253 bytes, plus a
// port).
const maxEntryLen = 300

// Spec is a policy as the API carries it:
// {"egress": "allowlist", "allow": ["github.com", "*.npmjs.org:443"]}.
type Spec struct {
	Egress Mode     `json:"egress"`
	Allow  []string `json:"allow,omitempty"`
}

// Policy is a parsed, valid Spec. Its zero value is not valid; use Parse.
// A Policy is immutable and safe for concurrent use.
type Policy struct {
	mode    Mode
	entries []Entry
}

// Entry is one parsed allowlist entry.
type Entry struct {
	raw      string
	name     string       // lower case, no trailing dot, without "*."; empty for IP entries
	wildcard bool         // name entry that matches proper subdomains of name
	prefix   netip.Prefix // IP entries; a literal is a full-length prefix
	port     uint16       // 0: every port
}

// Error is a policy that cannot be parsed or does not narrow its parent.
// Field names the offending part as the API spells it ("allow[2]",
// "egress").
type Error struct {
	Field  string
	Reason string
}

func (e *Error) Error() string { return e.Field + ": " + e.Reason }

func fieldErr(field, format string, args ...any) *Error {
	return &Error{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// Parse validates s and returns its policy. An allowlist may be empty
// (it then allows nothing, like none); open and none take no entries.
func Parse(s Spec) (*Policy, error) {
	switch s.Egress {
	case Open, None:
		if len(s.Allow) > 0 {
			return nil, fieldErr("allow", "takes no entries when egress is %q; use \"allowlist\"", s.Egress)
		}
		return &Policy{mode: s.Egress}, nil
	case Allowlist:
	default:
		return nil, fieldErr("egress", "unknown mode %q; want open, allowlist or none", s.Egress)
	}
	if len(s.Allow) > MaxEntries {
		return nil, fieldErr("allow", "at most %d entries", MaxEntries)
	}
	p := &Policy{mode: Allowlist, entries: make([]Entry, 0, len(s.Allow))}
	seen := make(map[string]bool, len(s.Allow))
	for i, raw := range s.Allow {
		e, err := ParseEntry(raw)
		if err != nil {
			return nil, fieldErr(fmt.Sprintf("allow[%d]", i), "%q: %v", raw, err)
		}
		if seen[e.String()] {
			return nil, fieldErr(fmt.Sprintf("allow[%d]", i), "%q is given twice", raw)
		}
		seen[e.String()] = true
		p.entries = append(p.entries, e)
	}
	return p, nil
}

// MustParse is Parse for policies written in code; it panics on error.
func MustParse(s Spec) *Policy {
	p, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return p
}

// ParseEntry parses one allowlist entry.
func ParseEntry(s string) (Entry, error) {
	if s == "" {
		return Entry{}, fmt.Errorf("is empty")
	}
	if len(s) > maxEntryLen {
		return Entry{}, fmt.Errorf("is longer than %d bytes", maxEntryLen)
	}
	e := Entry{raw: s}
	host, port, err := splitPort(s)
	if err != nil {
		return Entry{}, err
	}
	e.port = port
	if pfx, ok, err := parseIP(host); ok {
		if err != nil {
			return Entry{}, err
		}
		e.prefix = pfx
		return e, nil
	}
	name, wild := strings.CutPrefix(host, "*.")
	name, err = normalName(name)
	if err != nil {
		return Entry{}, err
	}
	if strings.Contains(name, "*") {
		return Entry{}, fmt.Errorf("a wildcard may only be a leading \"*.\"")
	}
	if wild && !strings.Contains(name, ".") {
		// "*.com" would open a whole top-level domain.
		return Entry{}, fmt.Errorf("a wildcard needs at least two labels after \"*.\"")
	}
	e.name, e.wildcard = name, wild
	return e, nil
}

// splitPort cuts an optional ":port" off an entry. A bare IPv6 literal
// or CIDR has colons of its own; a port after one needs brackets.
func splitPort(s string) (host string, port uint16, err error) {
	if strings.HasPrefix(s, "[") {
		end := strings.Index(s, "]")
		if end < 0 {
			return "", 0, fmt.Errorf("has \"[\" without \"]\"")
		}
		host, rest := s[1:end], s[end+1:]
		if !strings.Contains(host, ":") {
			return "", 0, fmt.Errorf("brackets are for IPv6 addresses only")
		}
		if rest == "" {
			return host, 0, nil
		}
		ps, ok := strings.CutPrefix(rest, ":")
		if !ok {
			return "", 0, fmt.Errorf("has text after \"]\" that is not \":port\"")
		}
		port, err := parsePort(ps)
		return host, port, err
	}
	if strings.Count(s, ":") > 1 {
		return s, 0, nil // IPv6 without a port
	}
	host, ps, ok := strings.Cut(s, ":")
	if !ok {
		return s, 0, nil
	}
	port, err = parsePort(ps)
	return host, port, err
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 || (len(s) > 1 && s[0] == '0') {
		return 0, fmt.Errorf("port %q is not a number from 1 to 65535", s)
	}
	return uint16(n), nil
}

// parseIP reports whether host is meant as an address (it has a "/" or
// parses as one) and parses it as a prefix.
func parseIP(host string) (netip.Prefix, bool, error) {
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return netip.Prefix{}, true, fmt.Errorf("is not a valid CIDR")
		}
		if p.Addr().Zone() != "" {
			return netip.Prefix{}, true, fmt.Errorf("has an IPv6 zone")
		}
		if p != p.Masked() {
			return netip.Prefix{}, true, fmt.Errorf("has host bits set; did you mean %s?", p.Masked())
		}
		return p, true, nil
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		if strings.Contains(host, ":") {
			return netip.Prefix{}, true, fmt.Errorf("is not a valid IPv6 address")
		}
		return netip.Prefix{}, false, nil
	}
	if a.Zone() != "" {
		return netip.Prefix{}, true, fmt.Errorf("has an IPv6 zone")
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), true, nil
}

// normalName lower-cases a DNS name, drops one trailing dot and checks
// its syntax (LDH labels of 1..63 bytes, at most 253 bytes; "_" is let
// through for service names such as _acme-challenge).
func normalName(s string) (string, error) {
	s = strings.ToLower(strings.TrimSuffix(s, "."))
	if s == "" {
		return "", fmt.Errorf("has no host name")
	}
	if len(s) > 253 {
		return "", fmt.Errorf("host name is longer than 253 bytes")
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" {
			return "", fmt.Errorf("host name has an empty label")
		}
		if len(label) > 63 {
			return "", fmt.Errorf("host name label %q is longer than 63 bytes", label)
		}
		if label == "*" {
			return "", fmt.Errorf("a wildcard may only be a leading \"*.\"")
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '*'
			if !ok {
				return "", fmt.Errorf("host name has the character %q", c)
			}
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return "", fmt.Errorf("host name label %q starts or ends with \"-\"", label)
		}
	}
	return s, nil
}

// String is the entry in its canonical form.
func (e Entry) String() string {
	var host string
	switch {
	case e.name == "":
		host = e.prefix.String()
		if e.prefix.IsSingleIP() {
			host = e.prefix.Addr().String()
		}
		if e.port != 0 && e.prefix.Addr().Is6() {
			host = "[" + host + "]"
		}
	case e.wildcard:
		host = "*." + e.name
	default:
		host = e.name
	}
	if e.port != 0 {
		host += ":" + strconv.Itoa(int(e.port))
	}
	return host
}

// Mode is the policy's mode.
func (p *Policy) Mode() Mode { return p.mode }

// Entries returns the allowlist's entries in their canonical form.
func (p *Policy) Entries() []string {
	out := make([]string, len(p.entries))
	for i, e := range p.entries {
		out[i] = e.String()
	}
	return out
}

// Spec is the policy in its API form, entries canonical.
func (p *Policy) Spec() Spec {
	s := Spec{Egress: p.mode}
	if p.mode == Allowlist {
		s.Allow = p.Entries()
	}
	return s
}

// MarshalJSON writes the policy's Spec.
func (p *Policy) MarshalJSON() ([]byte, error) { return json.Marshal(p.Spec()) }

// Equal reports whether p and q allow the same entries in the same mode.
func (p *Policy) Equal(q *Policy) bool {
	if p.mode != q.mode || len(p.entries) != len(q.entries) {
		return false
	}
	for i := range p.entries {
		if p.entries[i].String() != q.entries[i].String() {
			return false
		}
	}
	return true
}
