package preview

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Share links open one private port to whoever holds the link, without
// signing in. The link's secret arrives once, in the query parameter
// shareParam; the proxy exchanges it with control for the share it
// opens, sets a host-only cookie naming that share (never the secret),
// and redirects to the same address without the parameter. The secret
// is never relayed upstream nor logged, and stays out of the address
// bar, the history and Referer headers from then on. Every request
// afterwards rides on the share's ID: it is registered under the share's
// authority key, with the share's expiry, so revocation (an invalidation
// of kind share) and expiry end what it opened on every replica.

// shareParam is the share link's query parameter.
const shareParam = edgeapi.ShareParam

// shareCookie holds a redeemed share; see seal.go for the prefix.
const shareCookie = cookiePrefix + "share"

const purposeShare = "share"

// shareCookieGrace is how long a share cookie is kept past its link's
// expiry (see redeemShare); it admits nothing then.
const shareCookieGrace = 24 * time.Hour

// Share is a live share link as control describes it.
type Share struct {
	ID        string
	SandboxID string
	Port      int
	Expires   time.Time
}

// Shares checks share links with control.
type Shares interface {
	// RedeemShare exchanges a link's secret, shown on the preview host
	// label, for the share it opens; an error wraps ErrShareUnknown,
	// ErrShareRevoked or ErrShareExpired when control refused.
	RedeemShare(ctx context.Context, label, secret string) (Share, error)
	// CheckShare asks again about a redeemed share, by ID.
	CheckShare(ctx context.Context, label, id string) (Share, error)
}

// Control's refusals of a share link.
var (
	ErrShareUnknown = edgeapi.ErrPreviewShareUnknown
	ErrShareRevoked = edgeapi.ErrPreviewShareRevoked
	ErrShareExpired = edgeapi.ErrPreviewShareExpired
)

// sharePass is what the share cookie carries.
type sharePass struct {
	ID        string `json:"i"`
	Label     string `json:"l"`
	SandboxID string `json:"s"`
	Port      int    `json:"p"`
}

// shareSecret returns the secret r carries in shareParam, if any.
func shareSecret(r *http.Request) (string, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil || !q.Has(shareParam) {
		return "", false
	}
	return q.Get(shareParam), true
}

// redeemShare answers a request that carries a share link's secret: a
// cookie for the share and a redirect to the same address without the
// secret, or the page saying why the link no longer opens anything.
func (p *Proxy) redeemShare(w http.ResponseWriter, r *http.Request, label string, rt Route, secret string) {
	if p.cfg.Shares == nil || secret == "" {
		writeRouteProblem(w, r, errShareUnknown, rt, "")
		return
	}
	sh, err := p.cfg.Shares.RedeemShare(r.Context(), label, secret)
	if err == nil && (sh.SandboxID != rt.SandboxID || sh.Port != rt.Port) {
		err = ErrShareUnknown
	}
	if err != nil {
		p.writeShareRefusal(w, r, rt, err)
		return
	}
	ttl := sh.Expires.Sub(p.cfg.Now())
	// The cookie outlives the link by shareCookieGrace, so that whoever
	// holds it afterwards is told the link expired (control says so)
	// rather than sent to a sign-in they have no account for.
	keep := ttl + shareCookieGrace
	val, err := p.seal.seal(purposeShare, keep, sharePass{ID: sh.ID, Label: label, SandboxID: sh.SandboxID, Port: sh.Port})
	if err != nil || ttl < time.Second {
		writeRouteProblem(w, r, errShareExpired, rt, "")
		return
	}
	p.log.InfoContext(r.Context(), "share link redeemed", "share_id", sh.ID, "sandbox_id", sh.SandboxID, "label", label)
	http.SetCookie(w, &http.Cookie{
		Name: shareCookie, Value: val, Path: "/", MaxAge: int(keep / time.Second),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode,
	})
	u := *r.URL
	q, _ := url.ParseQuery(u.RawQuery) // parsed once already in shareSecret
	q.Del(shareParam)
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
}

// writeShareRefusal answers a share control refused, or could not be
// asked about.
func (p *Proxy) writeShareRefusal(w http.ResponseWriter, r *http.Request, rt Route, err error) {
	switch {
	case errors.Is(err, ErrShareRevoked):
		writeRouteProblem(w, r, errShareRevoked, rt, "")
	case errors.Is(err, ErrShareExpired):
		writeRouteProblem(w, r, errShareExpired, rt, "")
	case errors.Is(err, ErrShareUnknown):
		writeRouteProblem(w, r, errShareUnknown, rt, "")
	default:
		p.log.ErrorContext(r.Context(), "check share link", "err", err)
		writeProblem(w, r, errControl)
	}
}

// shareGrant admits r on its share cookie. handled: the cookie named a
// share for this host, and the answer is given (ok false) or the grant
// made; a missing or foreign cookie is not handled, and the other
// credentials are tried.
func (p *Proxy) shareGrant(w http.ResponseWriter, r *http.Request, label string, rt Route) (g grant, handled, ok bool) {
	if p.cfg.Shares == nil {
		return grant{}, false, false
	}
	c, err := r.Cookie(shareCookie)
	if err != nil {
		return grant{}, false, false
	}
	var pass sharePass
	if p.seal.open(purposeShare, c.Value, &pass) != nil || pass.Label != label || pass.SandboxID != rt.SandboxID || pass.Port != rt.Port {
		return grant{}, false, false
	}
	if !p.sameOrigin(r, label) {
		writeProblem(w, r, errCrossOrigin)
		return grant{}, true, false
	}
	sh, err := p.shares.check(r.Context(), p.cfg.Shares, label, pass.ID)
	if err == nil && !p.cfg.Now().Before(sh.Expires) {
		// Expiry needs no word from control (a cached answer predates it).
		err = ErrShareExpired
	}
	if err != nil {
		p.writeShareRefusal(w, r, rt, err)
		return grant{}, true, false
	}
	return grant{kind: grantShare, share: sh}, true, true
}

// shareCache remembers control's answers about redeemed shares for a
// short while, so the requests of one page load cost one question; an
// invalidation of the share drops its answer.
type shareCache struct {
	ttl time.Duration
	now func() time.Time
	max int

	mu      sync.Mutex // guards entries
	entries map[string]shareEntry
}

type shareEntry struct {
	share   Share
	err     error
	expires time.Time
}

func newShareCache(ttl time.Duration, now func() time.Time) *shareCache {
	return &shareCache{ttl: ttl, now: now, max: 100_000, entries: map[string]shareEntry{}}
}

func (c *shareCache) check(ctx context.Context, s Shares, label, id string) (Share, error) {
	c.mu.Lock()
	e, ok := c.entries[id]
	c.mu.Unlock()
	if ok && c.now().Before(e.expires) {
		return e.share, e.err
	}
	return c.fresh(ctx, s, label, id)
}

// fresh asks control past the cache and caches a refusal or a share,
// never a fault.
func (c *shareCache) fresh(ctx context.Context, s Shares, label, id string) (Share, error) {
	sh, err := s.CheckShare(ctx, label, id)
	var refusal *edgeapi.Refusal
	if err != nil && !errors.As(err, &refusal) {
		return Share{}, err
	}
	c.mu.Lock()
	if len(c.entries) >= c.max {
		clear(c.entries) // bounded, and rare
	}
	c.entries[id] = shareEntry{share: sh, err: err, expires: c.now().Add(c.ttl)}
	c.mu.Unlock()
	return sh, err
}

func (c *shareCache) drop(id string) {
	c.mu.Lock()
	delete(c.entries, id)
	c.mu.Unlock()
}
