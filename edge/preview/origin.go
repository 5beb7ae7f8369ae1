package preview

import (
	"net/http"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// Sibling previews are one site: a.preview.example.com and
// b.preview.example.com share the registrable domain, so SameSite=Lax does
// not keep the browser from sending a's cookie on requests that b's page
// starts (a WebSocket, a form POST, a fetch with credentials, a frame). One
// tenant's public preview could then drive another tenant's private dev
// server with the victim's session. The cookie is therefore honoured only
// for requests the preview's own pages make, and for top-level
// navigations (links and bookmarks from anywhere must work).

// sameOrigin reports whether a cookie-authenticated request may be
// relayed: a browser sent it from the preview's own origin, or it is a
// top-level navigation. A request without browser headers (curl with a
// copied cookie) passes, except for a WebSocket: every browser sends
// Origin on those, so a missing one is refused rather than guessed.
func (p *Proxy) sameOrigin(r *http.Request, label string) bool {
	own := p.cfg.Scheme + "://" + p.hostFor(label)
	origins := r.Header.Values("Origin")
	if len(origins) > 1 {
		return false
	}
	origin := ""
	if len(origins) == 1 {
		origin = origins[0]
	}
	if isUpgrade(r) {
		// Browsers serialise Origin as scheme://host[:port] with the
		// default port left out, as hostFor does: compare exactly.
		return origin == own
	}
	// Fetch metadata, where the browser sends it, also covers requests
	// whose Origin is "null" (a page with Referrer-Policy: no-referrer
	// posting to itself) and requests that carry no Origin at all
	// (frames, scripts, images).
	switch r.Header.Get("Sec-Fetch-Site") {
	case "same-origin", "none": // "none": the user typed or bookmarked it
		return true
	case "":
		// Browsers from before fetch metadata send Origin on every
		// cross-origin POST and CORS request; others send none.
		return origin == "" || origin == own
	default: // same-site (a sibling), cross-site, or unknown
		return topLevelNavigation(r)
	}
}

// topLevelNavigation reports whether r loads a page into a browser tab:
// a link followed or an address typed, not a frame, a fetch or a form
// POST.
func topLevelNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	dest := r.Header.Get("Sec-Fetch-Dest")
	return r.Header.Get("Sec-Fetch-Mode") == "navigate" && (dest == "document" || dest == "")
}

// isUpgrade reports whether r asks to become a WebSocket (HTTP/1.1
// Upgrade, or RFC 8441's extended CONNECT with :protocol websocket); the
// proxy relays no other protocol switch. A plain CONNECT is not one: it
// asks for a raw tunnel, which ServeHTTP refuses.
func isUpgrade(r *http.Request) bool {
	if r.Method == http.MethodConnect {
		return r.ProtoMajor >= 2 && strings.EqualFold(r.Header.Get(":protocol"), "websocket")
	}
	return strings.EqualFold(r.Header.Get("Upgrade"), "websocket") &&
		httpguts.HeaderValuesContainsToken(r.Header["Connection"], "Upgrade")
}
