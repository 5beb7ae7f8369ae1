package preview

import (
	"net/http"
	"strings"
)

// The app may trust exactly three forwarding headers, all set by the
// edge from what it knows: X-Forwarded-For (the client's address as the
// edge saw it), X-Forwarded-Host (the preview host) and
// X-Forwarded-Proto. Every other header through which a client could
// claim an address, host, scheme or URL to the app (Express, Rails,
// Django, Spring, nginx and CDN setups read many) is dropped: not by a
// list of known names, which misses the next CDN's, but by family.
//
// forwardingHeaders are the family's names that follow no pattern.
var forwardingHeaders = map[string]bool{
	"Forwarded": true, "Via": true, "Client-Ip": true, "X-Host": true,
	"X-Url-Scheme": true, "X-Rewrite-Url": true, "Front-End-Https": true,
}

// forwardingPrefixes and forwardingSuffixes name the rest of the family:
// X-Forwarded-*, X-Original-* (-Url, -Host, -Forwarded-For), X-Real-Ip,
// X-Client-Ip, X-Cluster-Client-Ip, X-ProxyUser-Ip, X-Envoy-* (Envoy's
// External-Address), CF-* (CF-Connecting-IP), Fastly-* (Fastly-Client-IP),
// True-Client-Ip, and any *-Client-Ip, *-Connecting-Ip, *-Real-Ip.
var (
	forwardingPrefixes = []string{"X-Forwarded-", "X-Original-", "X-Real-", "X-Client-", "X-Cluster-Client-",
		"X-Proxyuser-", "X-Envoy-", "Cf-", "Fastly-", "True-Client-"}
	forwardingSuffixes = []string{"-Client-Ip", "-Connecting-Ip", "-Real-Ip", "-Forwarded-For", "-Forwarded-Host", "-Forwarded-Proto"}
)

// isForwarding reports whether canonical header name n is of the family.
func isForwarding(n string) bool {
	if forwardingHeaders[n] {
		return true
	}
	for _, p := range forwardingPrefixes {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	for _, s := range forwardingSuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

// dropClientForwarding removes what the client sent of the forwarding
// family, also when spelled with underscores ("X_Forwarded_For"), which
// CGI-style servers (WSGI, Rack, PHP) read as the dashed name. It runs
// before the proxy adds its own three.
func dropClientForwarding(h http.Header) {
	for k := range h {
		// net/http leaves a name with "_" as sent, and a header map built
		// by hand may hold any spelling: compare canonical dashed names.
		n := http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
		// The preview-token header too, when not spelled as such:
		// stripCredentials removes the canonical spelling.
		if isForwarding(n) || (n != k && n == http.CanonicalHeaderKey(tokenHeader)) {
			delete(h, k)
		}
	}
}

// hostOnlyCookies drops the Domain attribute of every cookie the sandbox
// sets. On <label>.<domain> a browser accepts a Domain only if it is that
// host or a parent of it, and a parent (the preview domain, or above it)
// would plant the cookie on every sibling preview: one sandbox could
// then fix or shadow the cookies of another tenant's app. A Domain equal
// to the host itself would also reach hosts below it, which are never
// previews; host-only is what the app meant. Our own cookie names are
// refused outright: the sandbox never sees them, so it has no business
// setting them (it could only log its visitors out).
func hostOnlyCookies(h http.Header) {
	lines := h.Values("Set-Cookie")
	if len(lines) == 0 {
		return
	}
	kept := make([]string, 0, len(lines))
	for _, line := range lines {
		// Browsers split a Set-Cookie line at ";" (RFC 6265 5.2): the
		// first part is name=value, the rest attributes. Edit it as
		// text, so attributes Go's Cookie type does not know survive.
		parts := strings.Split(line, ";")
		name, _, _ := strings.Cut(parts[0], "=")
		if strings.HasPrefix(strings.ToLower(strings.TrimSpace(name)), strings.ToLower(cookiePrefix)) {
			continue
		}
		out := parts[:1]
		for _, a := range parts[1:] {
			k, _, _ := strings.Cut(a, "=")
			if !strings.EqualFold(strings.TrimSpace(k), "domain") {
				out = append(out, a)
			}
		}
		kept = append(kept, strings.Join(out, ";"))
	}
	h.Del("Set-Cookie")
	for _, l := range kept {
		h.Add("Set-Cookie", l)
	}
}
