package preview

import (
	"net/http"
	"strings"
)

// forwardingHeaders are request headers through which a client could
// claim another address, host or scheme to the sandbox's app (Express,
// Rails, Django and Spring read them behind a trusted proxy). The proxy
// sets X-Forwarded-For, -Host and -Proto itself; the rest it drops.
var forwardingHeaders = map[string]bool{
	"Forwarded": true, "X-Real-Ip": true, "Client-Ip": true, "X-Client-Ip": true,
	"True-Client-Ip": true, "X-Cluster-Client-Ip": true,
}

// dropClientForwarding removes what the client sent of the forwarding
// headers: all of forwardingHeaders and every X-Forwarded-*, also when
// spelled with underscores ("X_Forwarded_For"), which CGI-style servers
// (WSGI, Rack, PHP) read as the dashed name. It runs before the proxy
// adds its own.
func dropClientForwarding(h http.Header) {
	for k := range h {
		n := k
		if strings.Contains(k, "_") {
			n = http.CanonicalHeaderKey(strings.ReplaceAll(k, "_", "-"))
		}
		// The preview-token header too: stripCredentials removes its
		// dashed spelling.
		if forwardingHeaders[n] || strings.HasPrefix(n, "X-Forwarded-") || (n != k && n == http.CanonicalHeaderKey(tokenHeader)) {
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
