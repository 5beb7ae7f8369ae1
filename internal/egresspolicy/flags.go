package egresspolicy

import (
	"fmt"
	"net/netip"
	"strings"
)

// PrefixList is a repeatable flag of CIDRs (--egress-trust 10.1.0.0/16
// --egress-trust 127.0.0.1); a bare address is its single-address range
// and a value may hold several, comma-separated (as an environment
// variable does).
type PrefixList []netip.Prefix

// String lists the ranges, comma-separated.
func (l *PrefixList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, p := range *l {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// Set adds the ranges in v.
func (l *PrefixList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		p, err := parseRange(part)
		if err != nil {
			return err
		}
		*l = append(*l, p)
	}
	return nil
}

func parseRange(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Addr().Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not a CIDR", s)
		}
		if p != p.Masked() {
			return netip.Prefix{}, fmt.Errorf("%q has host bits set; did you mean %s?", s, p.Masked())
		}
		return p, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, fmt.Errorf("%q is not an IP address or CIDR", s)
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// AddrPortList is a repeatable flag of host:port addresses with IP hosts
// (the product's own listeners); comma-separated values are split.
type AddrPortList []netip.AddrPort

// String lists the addresses, comma-separated.
func (l *AddrPortList) String() string {
	if l == nil {
		return ""
	}
	s := make([]string, len(*l))
	for i, a := range *l {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

// Set adds the addresses in v.
func (l *AddrPortList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		a, err := netip.ParseAddrPort(part)
		if err != nil || a.Port() == 0 {
			return fmt.Errorf("%q is not an IP address and port", part)
		}
		*l = append(*l, a)
	}
	return nil
}
