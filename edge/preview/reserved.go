package preview

import (
	"net/http"
	"strings"
)

// Every preview host has one path namespace of the edge's own, under
// reservedPrefix: the ticket redemption, the waking page's status and
// sign-out. Request paths otherwise go to the app exactly as the client
// sent them, dot-segments and percent-encoding included (as nginx's
// proxy_pass without a URI and Caddy's reverse_proxy do): the app is the
// user's own dev server, it may give "%2F" or ".." a meaning of its own,
// and no access decision of the edge depends on the path (authorisation
// is per host). The one decision that does, whether the edge or the app
// answers, is taken on the decoded path, and a path that could resolve
// into the namespace some other way ("/x/../__sbx_preview/...",
// "/%2e%2e/__sbx_preview", "//__sbx_preview", "\__sbx_preview",
// another case) is refused rather than passed: the app never receives a
// request the edge would have taken under another spelling.
const (
	reservedName   = "__sbx_preview"
	reservedPrefix = "/" + reservedName + "/"
)

// signOutPath clears this host's session cookie (POST, same origin).
const signOutPath = reservedPrefix + "sign-out"

// reservedSegment reports whether any segment of the decoded path p
// begins with reservedName, in any case, after a slash or a backslash
// (which some servers read as one): every spelling that a server
// normalising dot-segments, slashes or case could take for the edge's
// namespace. One pass, no allocation: it runs on every request.
func reservedSegment(p string) bool {
	for i := 0; i+len(reservedName) < len(p); i++ {
		if c := p[i]; (c == '/' || c == '\\') && strings.EqualFold(p[i+1:i+1+len(reservedName)], reservedName) {
			return true
		}
	}
	return false
}

// sameOriginPOST refuses a browser's cross-origin POST by Sec-Fetch-Site,
// or Origin against Host. A sibling preview is same-site but not
// same-origin, so it is refused too. Requests from non-browsers carry
// neither header and pass; they carry no victim's cookies either.
var sameOriginPOST = http.NewCrossOriginProtection()

// signOut clears the host's session cookie. The session is a sealed
// cookie with no server-side record, so clearing it in this browser is
// what signing out can do; a copy taken elsewhere stays good until it
// expires (Config.SessionTTL). It is a POST from the preview's own
// origin: another site, a sibling preview included, cannot sign the
// user out (logout CSRF).
func (p *Proxy) signOut(w http.ResponseWriter, r *http.Request, label string) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeProblem(w, r, errSignOutMethod)
		return
	}
	if sameOriginPOST.Check(r) != nil {
		p.log.InfoContext(r.Context(), "cross-origin sign-out refused", "label", label,
			"origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
		writeProblem(w, r, errCrossOrigin)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1,
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if !formNavigation(r) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	_ = errorPage.Execute(w, pageData{Status: http.StatusOK, Code: "signed_out", Headline: "Signed out of this preview",
		Detail: "this browser's session for " + p.hostFor(label) + " is cleared",
		Next:   codeSpans("Open the preview's address again to sign in.")})

}

// formNavigation reports whether a POST loads its answer into a browser
// tab (a form submitted), rather than being a script's fetch.
func formNavigation(r *http.Request) bool {
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" {
		return m == "navigate"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}
