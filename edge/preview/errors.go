package preview

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sbxedge/sbx/internal/problem"
)

// Problems the edge itself answers with. Codes are stable: clients switch
// on them.
var (
	errUnknownHost  = problem.New(http.StatusNotFound, "preview_not_found", "no preview is exposed at this address")
	errBadRequest   = problem.New(http.StatusBadRequest, "bad_request", "the request target must be a path on this host")
	errConnect      = problem.New(http.StatusBadRequest, "bad_request", "CONNECT opens no tunnel here; only a WebSocket (:protocol websocket) may use it")
	errUnauthorized = problem.New(http.StatusUnauthorized, "preview_unauthenticated", "this preview is private: sign in, or send an account token as 'Authorization: Bearer <token>' or 'X-Sbx-Preview-Token'")
	errInvalidToken = problem.New(http.StatusUnauthorized, "preview_invalid_token", "the token or session is not valid (unknown, revoked or expired)")
	errForbidden    = problem.New(http.StatusForbidden, "preview_forbidden", "you are signed in, but not a member of the account that owns this sandbox")
	errNotReady     = problem.New(http.StatusServiceUnavailable, "sandbox_not_ready", "the sandbox is not running yet; retry shortly")
	errUpstream     = problem.New(http.StatusBadGateway, "upstream_unreachable", "nothing answered on this port inside the sandbox")
	errEnded        = problem.New(http.StatusGone, "sandbox_ended", "this sandbox has ended (deleted, past its deadline, or failed); its previews are gone")
	errWakeTimeout  = problem.New(http.StatusServiceUnavailable, "sandbox_waking", "the sandbox is awake, but its port did not answer within the wake limit")
	errControl      = problem.New(http.StatusServiceUnavailable, "control_unavailable", "the edge could not reach the control plane; retry shortly")
	errBadLogin     = problem.New(http.StatusBadRequest, "login_invalid", "the login link or its return address is not valid; open the preview URL again")
	errCrossOrigin  = problem.New(http.StatusForbidden, "cross_origin_refused", "the preview session cookie only works for requests from the preview's own pages; another origin must send an account token")
	// 400, not 401: the client did send credentials, and a challenge
	// would not help; the request itself is malformed.
	errAmbiguousAuth = problem.New(http.StatusBadRequest, "ambiguous_credentials", "the request carries more than one preview credential (repeated Authorization, token header or session cookie, or different tokens in both headers); send exactly one")
	errReservedPath  = problem.New(http.StatusBadRequest, "reserved_path", "paths under /__sbx_preview/ belong to the preview proxy: this is none of its endpoints, or one spelled another way (dot-segments, encoded characters, backslashes or case)")
	errSignOutMethod = problem.New(http.StatusMethodNotAllowed, "method_not_allowed", "sign out with POST from the preview's own pages")
	errBadBody       = problem.New(http.StatusBadRequest, "malformed_body", "the request body's framing is malformed")
	errShareRevoked  = problem.New(http.StatusGone, "share_revoked", "the sandbox's owner revoked it; it opens nothing any more")
	errShareExpired  = problem.New(http.StatusGone, "share_expired", "its time ran out; it opens nothing any more")
	errShareUnknown  = problem.New(http.StatusNotFound, "share_not_found", "this share link does not open this preview")
)

// busyProblem is the 503 past Config.MaxRequestsPerHost; its detail names
// the limit, so whoever meets it knows it is the edge's documented bound
// and not the app failing.
func busyProblem(limit int) *problem.Problem {
	return problem.New(http.StatusServiceUnavailable, "preview_busy", fmt.Sprintf(
		"more than %d requests and WebSockets are open to this preview host at once: the edge's limit per preview host (MaxRequestsPerHost); retry shortly", limit))
}

// writeProblem answers with a problem document that a browser app on any
// origin can read (CORS), or, for a top-level browser navigation, a
// designed page saying the same thing and what to do next (pages.go).
func writeProblem(w http.ResponseWriter, r *http.Request, p *problem.Problem) {
	writeProblemNaming(w, r, p, pageSubject{})
}

// writeRouteProblem is writeProblem for a request whose route is known:
// the page's commands name its sandbox, so they can be copied as they
// are. A public preview's page does not: its visitors need not learn the
// id, as its waking status does not tell them either.
func writeRouteProblem(w http.ResponseWriter, r *http.Request, p *problem.Problem, rt Route, service string) {
	s := pageSubject{sandboxID: rt.SandboxID, port: rt.Port, portLabel: rt.PortLabel, service: service}
	if rt.Public {
		// Its visitors are not the sandbox's owner: neither its id nor
		// its service's log is theirs to read.
		s.sandboxID = ""
		cp := *p
		cp.Logs = nil
		p = &cp
	}
	writeProblemNaming(w, r, p, s)
}

func writeProblemNaming(w http.ResponseWriter, r *http.Request, p *problem.Problem, s pageSubject) {
	writeProblemAs(w, r, p, s, isNavigation(r))
}

// writeFormProblem is writeProblem for a sign-in form's POST: a browser
// that submitted the form sees the page, a script the problem document.
func writeFormProblem(w http.ResponseWriter, r *http.Request, p *problem.Problem) {
	writeProblemAs(w, r, p, pageSubject{}, isNavigation(r) || (r.Method == http.MethodPost && formNavigation(r)))
}

func writeProblemAs(w http.ResponseWriter, r *http.Request, p *problem.Problem, s pageSubject, page bool) {
	cp := *p
	h := w.Header()
	h.Set("Access-Control-Allow-Origin", "*")
	h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
	if cp.Status == http.StatusServiceUnavailable && cp.RetryAfter == 0 {
		cp.RetryAfter = 2 * time.Second
	}
	if !page {
		problem.Write(w, r, &cp)
		return
	}
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	if cp.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(int(cp.RetryAfter/time.Second)))
	}
	w.WriteHeader(cp.Status)
	_ = errorPage.Execute(w, pageFor(&cp, s))
}

// isNavigation reports whether r is a top-level browser page load: the
// only kind of request that may be redirected to a login page or shown
// HTML. Fetch metadata decides when the browser sends it; old browsers
// fall back to Accept. WebSocket upgrades never are.
func isNavigation(r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	if isUpgrade(r) {
		return false
	}
	if m := r.Header.Get("Sec-Fetch-Mode"); m != "" {
		return m == "navigate"
	}
	return strings.Contains(r.Header.Get("Accept"), "text/html")
}
