package egress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// CredentialPathPrefix starts a credential route (see edgeapi).
const CredentialPathPrefix = edgeapi.CredentialPathPrefix

// Route is where a credential route forwards and the header it adds.
type Route struct {
	Upstream string // https://host[:port][/base], or http:// inside a trusted range
	Header   string
	Value    string // the secret; used for one request, never kept or logged
}

// CredentialRoutes opens a sandbox's credential routes: control, asked on
// every use (no cache), so a deleted credential stops at once.
type CredentialRoutes interface {
	// CredentialRoute returns the route if secret is the sandbox's proxy
	// credential and it may use the route now, else an error wrapping
	// ErrUnauthorized.
	CredentialRoute(ctx context.Context, sandboxID, secret, name string) (Route, error)
}

var openPolicy = egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Open})

// isCredentialRoute reports whether r is for a credential route rather
// than a proxied request.
func isCredentialRoute(r *http.Request) bool {
	return r.Method != http.MethodConnect && !r.URL.IsAbs() && strings.HasPrefix(r.URL.Path, CredentialPathPrefix)
}

// serveCredential forwards one request of a credential route to its
// upstream with the header added. The route is the account's own
// choice, so the sandbox's allowlist does not apply to it; the refused
// ranges do, and a plain-HTTP upstream must be in a trusted range.
func (g *Gateway) serveCredential(w http.ResponseWriter, r *http.Request) {
	req := &request{start: g.cfg.Now(), epoch: g.tunnels.epoch(), policy: openPolicy}
	parts := strings.SplitN(strings.TrimPrefix(r.URL.Path, CredentialPathPrefix), "/", 4)
	if len(parts) < 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" || g.cfg.Credentials == nil {
		g.unauthenticated(w, "not a credential route: use the URL in SBX_CREDENTIAL_<NAME>_URL")
		return
	}
	sandboxID, secret, name := parts[0], parts[1], parts[2]
	tail := "/"
	if len(parts) == 4 {
		tail += parts[3]
	}
	req.sandboxID, req.secret = sandboxID, secret
	req.target = egresspolicy.Target{Name: "credential-route." + name, Port: 0}
	route, err := g.cfg.Credentials.CredentialRoute(r.Context(), sandboxID, secret, name)
	if errors.Is(err, ErrUnauthorized) {
		// Logged against the sandbox only if the credential is its own;
		// an unknown caller gets the same words and no record.
		if _, perr := g.cfg.Sandboxes.EgressPolicy(r.Context(), sandboxID, secret); perr != nil {
			g.unauthenticated(w, "the credential route's URL is not valid (wrong, or its sandbox has ended)")
			return
		}
		g.decide(w, req, http.StatusForbidden, Denied, fmt.Sprintf("credential route %q is not available to this sandbox (not named at create, or deleted)", name))
		return
	}
	if err != nil {
		g.cfg.Logger.Warn("egress: credential route", "sandbox_id", sandboxID, "credential", name, "err", err)
		g.metrics.decisions.WithLabelValues(string(Failed)).Inc()
		refuse(w, http.StatusServiceUnavailable, "the egress gateway cannot open the credential route right now; try again")
		return
	}
	up, err := url.Parse(route.Upstream)
	if err != nil || (up.Scheme != "https" && up.Scheme != "http") {
		g.decide(w, req, http.StatusBadGateway, Failed, fmt.Sprintf("credential route %q has an unusable upstream", name))
		return
	}
	port := uint16(443)
	if up.Scheme == "http" {
		port = 80
	}
	if p := up.Port(); p != "" {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			g.decide(w, req, http.StatusBadGateway, Failed, fmt.Sprintf("credential route %q: upstream port %q", name, p))
			return
		}
		port = uint16(n)
	}
	target, err := egresspolicy.ParseTarget(up.Hostname(), port)
	if err != nil {
		g.decide(w, req, http.StatusBadGateway, Failed, fmt.Sprintf("credential route %q: %v", name, err))
		return
	}
	req.target = target
	addrs, status, verdict, reason := g.choose(r.Context(), req)
	if reason != "" {
		g.decide(w, req, status, verdict, "credential route "+strconv.Quote(name)+": "+reason)
		return
	}
	if up.Scheme == "http" {
		for _, a := range addrs {
			if !g.cfg.Ranges.Trusted(a) {
				g.decide(w, req, http.StatusForbidden, Denied, fmt.Sprintf("credential route %q: a plain-HTTP upstream must be in a trusted range; %s is not", name, a))
				return
			}
		}
	}
	conn, addr, err := g.dial(r.Context(), addrs, target.Port)
	if err != nil {
		g.decide(w, req, http.StatusBadGateway, Failed, fmt.Sprintf("credential route %q: cannot connect to %s: %v", name, target, err))
		return
	}
	base := strings.TrimSuffix(up.Path, "/")
	g.relayHTTP(w, r, req, conn, addr, func(pr *httputil.ProxyRequest) {
		pr.Out.URL = &url.URL{Scheme: up.Scheme, Host: up.Host, Path: base + tail, RawQuery: r.URL.RawQuery}
		pr.Out.Host = up.Host
		pr.Out.Header.Del("Proxy-Authorization")
		pr.Out.Header.Set(route.Header, route.Value)
	})
}
