package preview

import (
	"errors"
	"net/http"
	"strings"
	"time"
)

// tokenHeader carries an account token for API clients that cannot set
// Authorization (it may belong to the app itself).
const tokenHeader = "X-Sbx-Preview-Token"

// ticketPath is where the login host sends the browser back, on the
// preview host, to exchange a one-time ticket for the host's cookie.
const ticketPath = "/__sbx_preview/ticket"

// ticketTTL is how long a ticket is good: one redirect.
const ticketTTL = 60 * time.Second

// authorize admits a request to a private preview or answers it, and
// says what admitted it. The order is: a token header (API clients), then
// the host's cookie, whose identity must still be a member of the
// account. A request with neither is redirected to login only if it is a
// top-level browser navigation; everything else (fetch, WebSocket, curl)
// gets 401.
func (p *Proxy) authorize(w http.ResponseWriter, r *http.Request, label string, rt Route) (grant, bool) {
	secret, ok, ambiguous := requestToken(r)
	if ambiguous {
		writeProblem(w, r, errAmbiguousAuth)
		return grant{}, false
	}
	if ok {
		acct, err := p.cfg.Accounts.TokenAccount(r.Context(), secret)
		switch {
		case errors.Is(err, ErrInvalidToken):
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx-preview", error="invalid_token"`)
			writeProblem(w, r, errInvalidToken)
			return grant{}, false
		case err != nil:
			p.log.ErrorContext(r.Context(), "check preview token", "err", err)
			writeProblem(w, r, errControl)
			return grant{}, false
		case acct != rt.AccountID:
			writeProblem(w, r, errForbidden)
			return grant{}, false
		}
		return grant{kind: grantToken, secret: secret}, true
	}
	if g, handled, ok := p.shareGrant(w, r, label, rt); handled {
		return g, ok
	}
	cookie, ambiguous := sessionValue(r)
	if ambiguous {
		writeProblem(w, r, errAmbiguousAuth)
		return grant{}, false
	}
	if cookie != "" {
		var s session
		if p.seal.open(purposeSession, cookie, &s) == nil &&
			s.Label == label && s.SandboxID == rt.SandboxID && s.AccountID == rt.AccountID {
			if !p.sameOrigin(r, label) {
				p.log.InfoContext(r.Context(), "cross-origin request refused", "sandbox_id", rt.SandboxID, "label", label,
					"method", r.Method, "origin", r.Header.Get("Origin"), "sec_fetch_site", r.Header.Get("Sec-Fetch-Site"))
				writeProblem(w, r, errCrossOrigin)
				return grant{}, false
			}
			// The cookie proves who signed in; membership is checked
			// again, so removing someone from the members file locks
			// them out without waiting for the cookie to expire.
			id := s.identity()
			member, err := p.member(r.Context(), id, rt.AccountID)
			if err != nil {
				p.log.ErrorContext(r.Context(), "check preview membership", "err", err)
				writeProblem(w, r, errControl)
				return grant{}, false
			}
			if member {
				return grant{kind: grantSession, id: id}, true
			}
		}
		// A stale or foreign cookie is treated as none: a browser is sent
		// to log in again, which replaces it.
	}
	if isNavigation(r) {
		target := p.cfg.Scheme + "://" + p.hostFor(label) + r.URL.RequestURI()
		http.Redirect(w, r, p.apexURL()+"/login?rd="+urlQueryEscape(target), http.StatusFound)
		return grant{}, false
	}
	w.Header().Set("WWW-Authenticate", `Bearer realm="sbx-preview"`)
	writeProblem(w, r, errUnauthorized)
	return grant{}, false
}

// requestToken returns the account token r carries, in the token header
// or as a Bearer Authorization. ambiguous: it carries more than one (either
// header repeated, or both with different tokens). Which one the client
// meant is not the edge's to guess: a proxy or app in between may have
// added one, and whichever it picked, some other reader of the request
// would pick the other. Authorization of another scheme is the app's and
// is no candidate.
func requestToken(r *http.Request) (secret string, ok, ambiguous bool) {
	hdr, authz := r.Header[tokenHeader], r.Header["Authorization"]
	if len(hdr) > 1 || len(authz) > 1 {
		return "", false, true
	}
	if len(hdr) == 1 {
		secret = strings.TrimSpace(hdr[0])
		ok = secret != ""
	}
	if len(authz) == 1 {
		scheme, v, found := strings.Cut(authz[0], " ")
		if v = strings.TrimSpace(v); found && strings.EqualFold(scheme, "Bearer") && v != "" {
			if ok && v != secret {
				return "", false, true
			}
			secret, ok = v, true
		}
	}
	return secret, ok, false
}

// sessionValue returns the value of r's session cookie ("" without one).
// ambiguous: r carries it more than once with different values; a
// browser sends one (the cookie is __Host-, so nothing else can set one
// beside it), and choosing among several is for the request to settle.
func sessionValue(r *http.Request) (value string, ambiguous bool) {
	cs := r.CookiesNamed(sessionCookie)
	for _, c := range cs {
		if c.Value != cs[0].Value {
			return "", true
		}
	}
	if len(cs) == 0 {
		return "", false
	}
	return cs[0].Value, false
}

// redeemTicket turns a one-time ticket into this host's session cookie and
// sends the browser on to the page it first asked for. The ticket must
// name this very host and the sandbox it routes to now.
func (p *Proxy) redeemTicket(w http.ResponseWriter, r *http.Request, label string, rt Route) {
	var t ticket
	if err := p.seal.open(purposeTicket, r.URL.Query().Get("t"), &t); err != nil ||
		t.Label != label || t.SandboxID != rt.SandboxID || t.AccountID != rt.AccountID ||
		!safePath(t.Path) || t.Nonce == "" {
		writeProblem(w, r, errBadLogin)
		return
	}
	// Checked last, so only a genuine ticket for this host uses up its
	// nonce. A replay gets exactly the answer a forged ticket gets.
	first, err := p.tickets.Redeem(r.Context(), t.Nonce, ticketTTL)
	if err != nil {
		p.log.ErrorContext(r.Context(), "redeem preview ticket", "err", err)
		writeProblem(w, r, errControl)
		return
	}
	if !first {
		p.log.InfoContext(r.Context(), "preview ticket replayed", "subject", t.Subject, "sandbox_id", t.SandboxID)
		writeProblem(w, r, errBadLogin)
		return
	}
	val, err := p.seal.seal(purposeSession, p.cfg.SessionTTL, t.session)
	if err != nil {
		writeProblem(w, r, errBadLogin)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: val, Path: "/", MaxAge: int(p.cfg.SessionTTL / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, t.Path, http.StatusFound)
}

// safePath accepts a path-and-query on the same host: it must start with
// one slash, so "//evil.example" and "/\evil.example" (which browsers
// treat as another host) are refused.
func safePath(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "//") && !strings.HasPrefix(p, "/\\") &&
		!strings.ContainsAny(p, "\r\n\t")
}
