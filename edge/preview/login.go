package preview

import (
	"context"
	"errors"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"golang.org/x/oauth2"

	"github.com/sbxedge/sbx/edge/preview/previewhost"
)

// loginTTL bounds the OIDC round trip (the user may have to type a
// password at the provider).
const loginTTL = 10 * time.Minute

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

// serveLogin serves the apex of the preview domain: the login start, the
// OIDC callback, and in sbx dev the local sign-in form. Nothing here
// forwards anywhere.
func (p *Proxy) serveLogin(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/login" && r.Method == http.MethodGet:
		p.startLogin(w, r)
	case r.URL.Path == "/callback" && r.Method == http.MethodGet && p.oidc != nil:
		p.callback(w, r)
	case r.URL.Path == "/dev-login" && r.Method == http.MethodPost && p.cfg.DevSignIn != nil && p.oidc == nil:
		// Defence in depth beside the state check: a browser's
		// cross-origin POST (a sibling preview is same-site, not
		// same-origin) is refused before the login cookie is read.
		if sameOriginPOST.Check(r) != nil {
			writeFormProblem(w, r, errBadLogin)
			return
		}
		p.devLogin(w, r)
	default:
		writeProblem(w, r, errUnknownHost)
	}
}

// target is a validated place to return to after login.
type target struct {
	label string
	path  string
	route Route
}

// validTarget accepts only a URL of a live private preview host of this
// very proxy, exactly as the proxy itself spells it (scheme, host, port):
// anything else is an open redirect waiting to happen.
func (p *Proxy) validTarget(ctx context.Context, rd string) (target, error) {
	u, err := url.Parse(rd)
	if err != nil || u.Scheme != p.cfg.Scheme || u.User != nil || u.Opaque != "" || u.Fragment != "" {
		return target{}, errBadLogin
	}
	kind, label, _ := previewhost.Parse(u.Host, p.cfg.Domain)
	if kind != previewhost.Preview || strings.ToLower(u.Host) != p.hostFor(label) {
		return target{}, errBadLogin
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	if u.RawQuery != "" {
		path += "?" + u.RawQuery
	}
	if !safePath(path) || reservedSegment(u.Path) {
		return target{}, errBadLogin
	}
	rt, err := p.routes.get(ctx, label)
	if errors.Is(err, ErrHostEnded) {
		return target{}, errEnded
	}
	if errors.Is(err, ErrUnknownHost) {
		return target{}, errUnknownHost
	}
	if err != nil {
		return target{}, err
	}
	return target{label: label, path: path, route: rt}, nil
}

func (p *Proxy) startLogin(w http.ResponseWriter, r *http.Request) {
	t, err := p.validTarget(r.Context(), r.URL.Query().Get("rd"))
	if err != nil {
		p.loginError(w, r, err)
		return
	}
	st := loginState{State: randomString(), Nonce: randomString(), Verifier: oauth2.GenerateVerifier(), Target: r.URL.Query().Get("rd")}
	val, err := p.seal.seal(purposeLogin, loginTTL, st)
	if err != nil {
		p.loginError(w, r, err)
		return
	}
	// Lax: the provider's redirect back is a top-level GET from another
	// site, which Lax cookies accompany.
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: val, Path: "/", MaxAge: int(loginTTL / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	w.Header().Set("Cache-Control", "no-store")
	if p.oidc == nil {
		h := w.Header()
		h.Set("Content-Type", "text/html; charset=utf-8")
		// Its one button signs the browser in: no other page (a
		// sibling preview's included) may frame it and get it clicked.
		h.Set("Content-Security-Policy", "frame-ancestors 'none'")
		h.Set("X-Frame-Options", "DENY")
		_ = devLoginPage.Execute(w, map[string]string{"User": p.cfg.DevSignIn.User, "State": st.State, "Target": st.Target, "Host": t.label})
		return
	}
	http.Redirect(w, r, p.oauth.AuthCodeURL(st.State, oidc.Nonce(st.Nonce), oauth2.S256ChallengeOption(st.Verifier)), http.StatusFound)
}

// loginState reads and clears the login cookie, checking the state the
// provider (or the dev form) echoed back.
func (p *Proxy) loginState(w http.ResponseWriter, r *http.Request, state string) (loginState, bool) {
	c, err := r.Cookie(loginCookie)
	if err != nil {
		return loginState{}, false
	}
	http.SetCookie(w, &http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	var st loginState
	if p.seal.open(purposeLogin, c.Value, &st) != nil || state == "" || st.State != state {
		return loginState{}, false
	}
	return st, true
}

func (p *Proxy) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	st, ok := p.loginState(w, r, q.Get("state"))
	if !ok || q.Get("code") == "" {
		p.loginError(w, r, errBadLogin)
		return
	}
	tok, err := p.oauth.Exchange(r.Context(), q.Get("code"), oauth2.VerifierOption(st.Verifier))
	if err != nil {
		p.log.InfoContext(r.Context(), "OIDC code exchange failed", "err", err)
		p.loginError(w, r, errBadLogin)
		return
	}
	raw, _ := tok.Extra("id_token").(string)
	idt, err := p.verifier.Verify(r.Context(), raw)
	if err != nil || idt.Nonce != st.Nonce {
		p.log.InfoContext(r.Context(), "OIDC id token refused", "err", err)
		p.loginError(w, r, errBadLogin)
		return
	}
	var claims struct {
		Email         string `json:"email"`
		EmailVerified bool   `json:"email_verified"`
	}
	_ = idt.Claims(&claims)
	id := Identity{Issuer: idt.Issuer, Subject: idt.Subject, Email: claims.Email, EmailVerified: claims.EmailVerified}
	p.finishLogin(w, r, st.Target, id)
}

func (p *Proxy) devLogin(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	st, ok := p.loginState(w, r, r.PostFormValue("state"))
	if !ok {
		p.loginError(w, r, errBadLogin)
		return
	}
	p.finishLogin(w, r, st.Target, Identity{Issuer: devIssuer, Subject: p.cfg.DevSignIn.User})
}

// finishLogin checks membership and sends the browser to the preview host
// with a one-time ticket.
func (p *Proxy) finishLogin(w http.ResponseWriter, r *http.Request, rd string, id Identity) {
	t, err := p.validTarget(r.Context(), rd)
	if err != nil {
		p.loginError(w, r, err)
		return
	}
	var member bool
	if p.cfg.DevSignIn != nil && id.Issuer == devIssuer {
		member = t.route.AccountID == p.cfg.DevSignIn.AccountID
	} else if member, err = p.cfg.Accounts.Member(r.Context(), id, t.route.AccountID); err != nil {
		p.loginError(w, r, err)
		return
	}
	subject := id.Issuer + "#" + id.Subject
	if !member {
		p.log.InfoContext(r.Context(), "preview login refused: not a member", "subject", subject, "sandbox_id", t.route.SandboxID)
		writeFormProblem(w, r, errForbidden)
		return
	}
	tk := ticket{
		session: session{Label: t.label, SandboxID: t.route.SandboxID, AccountID: t.route.AccountID, Subject: subject,
			Email: id.Email, EmailVerified: id.EmailVerified},
		Path: t.path, Nonce: randomString(),
	}
	val, err := p.seal.seal(purposeTicket, ticketTTL, tk)
	if err != nil {
		p.loginError(w, r, err)
		return
	}
	p.log.InfoContext(r.Context(), "preview login", "subject", subject, "sandbox_id", t.route.SandboxID)
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, p.cfg.Scheme+"://"+p.hostFor(t.label)+ticketPath+"?t="+url.QueryEscape(val), http.StatusFound)
}

func (p *Proxy) loginError(w http.ResponseWriter, r *http.Request, err error) {
	switch {
	case errors.Is(err, errBadLogin):
		writeFormProblem(w, r, errBadLogin)
	case errors.Is(err, errUnknownHost):
		writeFormProblem(w, r, errUnknownHost)
	case errors.Is(err, errEnded):
		writeFormProblem(w, r, errEnded)
	default:
		p.log.ErrorContext(r.Context(), "preview login failed", "err", err)
		writeFormProblem(w, r, errControl)
	}
}

// devLoginPage is styled as the error pages are (pageStyle): the sign-in
// and every refusal after it read as one product. The style names no
// "#signin": browser automation that finds "#signin" by text search
// (chromedp's default) would match the style sheet, not the button.
var devLoginPage = template.Must(template.New("dev-login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Sign in to preview {{.Host}}</title>
<style>` + pageStyle + `
form button{background:var(--accent);border-color:var(--accent);color:#fff;font-weight:600;padding:.6em 1.2em;margin-top:.6em}
</style></head>
<body><main class="card" data-page="dev-sign-in">
<h1>Sign in to preview <code>{{.Host}}</code></h1>
<p class="meta">sbx dev · development sign-in</p>
<p>You are signing in as <strong>{{.User}}</strong>, the account <code>sbx dev</code> made for you. Production edges sign in with an OIDC provider instead.</p>
<form method="post" action="/dev-login">
<input type="hidden" name="state" value="{{.State}}">
<button id="signin" type="submit">Sign in as {{.User}}</button>
</form>
</main></body></html>
`))
