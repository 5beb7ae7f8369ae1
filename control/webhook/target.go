package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// Resolver is the subset of *net.Resolver the delivery uses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer opens a connection to an address already checked.
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// TargetError says why a webhook URL is refused.
type TargetError struct{ Reason string }

func (e *TargetError) Error() string { return e.Reason }

// maxURL bounds a webhook URL.
const maxURL = 2048

// checkURL parses a webhook URL and refuses what no delivery may reach:
// a scheme other than https (http only to an address in a trusted
// range, a receiver on the operator's own network), credentials in the
// URL (they would be shown by every list), and an address in a refused
// range, whether written as an IP or resolved from the name now. A name
// that does not resolve now is accepted: each delivery resolves and
// checks it again before dialing.
func (h *Hub) checkURL(ctx context.Context, raw string) (*url.URL, error) {
	if len(raw) > maxURL {
		return nil, &TargetError{fmt.Sprintf("is longer than %d bytes", maxURL)}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return nil, &TargetError{"is not an absolute http(s) URL"}
	}
	if u.User != nil {
		return nil, &TargetError{"must not carry credentials; the signature authenticates deliveries"}
	}
	if u.Fragment != "" {
		return nil, &TargetError{"must not have a fragment"}
	}
	port, err := urlPort(u)
	if err != nil {
		return nil, &TargetError{err.Error()}
	}
	host := u.Hostname()
	if a, err := netip.ParseAddr(host); err == nil {
		why := h.check(netip.AddrPortFrom(a, port))
		if why != "" {
			return nil, &TargetError{"is refused: " + why}
		}
		if u.Scheme == "http" && !h.trusted(a) {
			return nil, &TargetError{"must use https (http only to an address in a trusted range)"}
		}
		return u, nil
	}
	if u.Scheme != "https" {
		return nil, &TargetError{"must use https (http only to an address in a trusted range)"}
	}
	addrs, err := h.resolver.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		return u, nil
	}
	var whys []string
	for _, a := range addrs {
		why := h.check(netip.AddrPortFrom(a, port))
		if why == "" {
			return u, nil
		}
		whys = append(whys, why)
	}
	return nil, &TargetError{fmt.Sprintf("is refused: %s resolves only to refused addresses (%s)", host, strings.Join(whys, "; "))}
}

func urlPort(u *url.URL) (uint16, error) {
	switch u.Scheme {
	case "https", "http":
	default:
		return 0, errors.New("must be an http(s) URL")
	}
	p := u.Port()
	if p == "" {
		if u.Scheme == "https" {
			return 443, nil
		}
		return 80, nil
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q is not a port", p)
	}
	return uint16(n), nil
}

func (h *Hub) trusted(a netip.Addr) bool {
	for _, p := range h.cfg.Trust {
		if p.Contains(a.Unmap()) {
			return true
		}
	}
	return false
}

// check says why a delivery must not reach ap, or "" when it may: the
// refused ranges unless trusted, and on loopback this host's own servers
// whatever the trust.
func (h *Hub) check(ap netip.AddrPort) string {
	if a := ap.Addr().Unmap(); (a.IsLoopback() || a.IsUnspecified()) && h.own != nil {
		if what, ok := h.own(int(ap.Port())); ok {
			return fmt.Sprintf("%s is %s", netip.AddrPortFrom(a, ap.Port()), what)
		}
	}
	return h.ranges.Check(ap)
}

// dial is the delivery transport's only way out: it resolves the name
// itself, checks every address against the refused ranges, and dials
// only an address it checked, so a name that resolves to a public
// address at create and to the metadata endpoint now (DNS rebinding)
// is refused here.
func (h *Hub) dial(ctx context.Context, network, address string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("webhook target %q: %w", address, err)
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("webhook target %q: bad port", address)
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = h.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, fmt.Errorf("resolve %s: %w", host, err)
	}
	var whys []string
	var dialErr error
	for _, a := range addrs {
		ap := netip.AddrPortFrom(a.Unmap(), uint16(port))
		if why := h.check(ap); why != "" {
			whys = append(whys, why)
			continue
		}
		c, err := h.dialer.DialContext(ctx, network, ap.String())
		if err == nil {
			return c, nil
		}
		dialErr = errors.Join(dialErr, err)
	}
	if dialErr != nil {
		return nil, dialErr
	}
	if len(whys) == 0 {
		return nil, fmt.Errorf("resolve %s: no address", host)
	}
	return nil, &TargetError{"refused: " + strings.Join(whys, "; ")}
}

// checkedRanges builds the refused ranges a webhook target is judged by:
// egress's always-refused ranges, opened only where the operator trusts.
func checkedRanges(trust []netip.Prefix) (*egresspolicy.Ranges, error) {
	return egresspolicy.NewRanges(egresspolicy.RangesConfig{Trust: trust})
}
