// Package previewhost parses the Host of a request to the preview proxy.
// It faces the internet, so it is strict and fuzzed: anything that is not
// exactly "<label>.<domain>" (optionally with a port) or the bare domain is
// refused, including IP literals, empty labels, nested labels and
// non-ASCII.
package previewhost

import (
	"net"
	"strings"
)

// Kind says what a host names.
type Kind int

const (
	// Invalid hosts are answered without any lookup.
	Invalid Kind = iota
	// Apex is the bare preview domain, where login is served.
	Apex
	// Preview is one exposed port: "<label>.<domain>".
	Preview
)

// Parse splits host (a request's Host, maybe with a port) against domain
// (lowercase, no port, e.g. "preview.example.com"). It returns the kind,
// the label for Preview hosts, and the port as written ("" if none).
func Parse(host, domain string) (kind Kind, label, port string) {
	if host == "" || len(host) > 253+6 {
		return Invalid, "", ""
	}
	name := host
	if strings.HasPrefix(host, "[") || strings.Count(host, ":") > 1 {
		return Invalid, "", "" // IPv6 literal or garbage
	}
	if h, p, err := net.SplitHostPort(host); err == nil {
		if !validPort(p) {
			return Invalid, "", ""
		}
		name, port = h, p
	} else if strings.Contains(host, ":") {
		return Invalid, "", ""
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if ipv4Chars(name) && net.ParseIP(name) != nil {
		return Invalid, "", ""
	}
	if name == domain {
		return Apex, "", port
	}
	l, ok := strings.CutSuffix(name, "."+domain)
	if !ok || !validLabel(l) {
		return Invalid, "", ""
	}
	return Preview, l, port
}

// ipv4Chars reports whether name has only digits and dots: with no
// colon left in it, only then may net.ParseIP take it (as an IPv4
// address), and a host name skips the parse and the error it allocates.
func ipv4Chars(name string) bool {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c != '.' && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}

// validLabel accepts one DNS label of letters, digits and inner hyphens.
func validLabel(l string) bool {
	if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
		return false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	n := 0
	for i := 0; i < len(p); i++ {
		if p[i] < '0' || p[i] > '9' {
			return false
		}
		n = n*10 + int(p[i]-'0')
	}
	return n >= 1 && n <= 65535
}
