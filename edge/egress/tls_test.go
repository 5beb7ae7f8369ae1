package egress

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// tlsUpstream is an HTTPS server on loopback; it returns its port.
func tlsUpstream(t *testing.T) uint16 {
	t.Helper()
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello over tls")
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()
}

// fakeCredentials serves the rig's sandbox the routes in routes.
type fakeCredentials struct{ routes map[string]Route }

func (f fakeCredentials) CredentialRoute(_ context.Context, id, sec, name string) (Route, error) {
	r, ok := f.routes[name]
	if id != sandboxID || sec != secret || !ok {
		return Route{}, fmt.Errorf("route %s: %w", name, ErrUnauthorized)
	}
	return r, nil
}

// TestCredentialRouteHTTPS: a credential route forwards to an HTTPS
// upstream (on loopback, in a trusted range, with a test CA) with the
// header added, verifying the upstream's certificate against the URL's
// host name while dialing only the address it resolved and checked. An
// upstream whose certificate does not chain to the configured CAs, or
// does not name the host, gets nothing: the route fails with a 502, the
// request never arrives. The secret shows in no response and no log
// entry.
func TestCredentialRouteHTTPS(t *testing.T) {
	t.Parallel()
	const apiKey = "sk-upstream-secret-value"
	type seen struct{ path, query, key, proxyAuth string }
	got := make(chan seen, 8)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.Path, r.URL.RawQuery, r.Header.Get("X-Api-Key"), r.Header.Get("Proxy-Authorization")}
		fmt.Fprint(w, "hello from the api")
	}))
	// The refused handshakes are the test's point, not noise to print.
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()
	testCA := x509.NewCertPool()
	testCA.AddCert(srv.Certificate())
	routes := fakeCredentials{routes: map[string]Route{
		// httptest's certificate names example.com, 127.0.0.1 and ::1.
		"api":      {Upstream: fmt.Sprintf("https://example.com:%d/base/", port), Header: "x-api-key", Value: apiKey},
		"byip":     {Upstream: fmt.Sprintf("https://127.0.0.1:%d", port), Header: "x-api-key", Value: apiKey},
		"wrongcn":  {Upstream: fmt.Sprintf("https://api.test:%d", port), Header: "x-api-key", Value: apiKey},
		"external": {Upstream: "https://10.1.2.3/", Header: "x-api-key", Value: apiKey},
	}}
	r := newRig(t, mode(egresspolicy.None), loopback, func(c *Config) {
		c.Credentials, c.UpstreamRootCAs = routes, testCA
	})
	r.resolver.set("example.com", []string{"127.0.0.1"})
	r.resolver.set("api.test", []string{"127.0.0.1"})
	get := func(rg *rig, name, rest string) (int, string) {
		t.Helper()
		resp, err := http.Get(rg.url + CredentialPathPrefix + sandboxID + "/" + secret + "/" + name + rest)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if strings.Contains(string(b), apiKey) || strings.Contains(fmt.Sprint(resp.Header), apiKey) {
			t.Errorf("route %s: the response shows the upstream's secret", name)
		}
		return resp.StatusCode, string(b)
	}
	noRequest := func(what string) {
		t.Helper()
		select {
		case s := <-got:
			t.Errorf("%s: the upstream got a request %+v", what, s)
		default:
		}
	}

	if code, b := get(r, "api", "/v1/messages?beta=1"); code != http.StatusOK || b != "hello from the api" {
		t.Fatalf("route api: %d %q", code, b)
	}
	if s := <-got; s.path != "/base/v1/messages" || s.query != "beta=1" || s.key != apiKey || s.proxyAuth != "" {
		t.Errorf("the upstream saw %+v; want /base/v1/messages?beta=1 with the key and no proxy credential", s)
	}
	if code, _ := get(r, "byip", "/"); code != http.StatusOK {
		t.Errorf("route byip: %d", code)
	} else if s := <-got; s.key != apiKey {
		t.Errorf("route byip: the upstream saw %+v", s)
	}
	// The certificate does not name api.test.
	if code, b := get(r, "wrongcn", "/"); code != http.StatusBadGateway || !strings.Contains(b, "certificate") {
		t.Errorf("route to a host the certificate does not name: %d %q; want 502 naming the certificate", code, b)
	}
	noRequest("wrong name")
	// Never dialed: outside the trusted range and private.
	if code, _ := get(r, "external", "/"); code != http.StatusForbidden {
		t.Errorf("route to a private address: %d; want 403", code)
	}
	// Without the test CA, the system's roots do not trust the upstream.
	plain := newRig(t, mode(egresspolicy.None), loopback, func(c *Config) { c.Credentials = routes })
	plain.resolver.set("example.com", []string{"127.0.0.1"})
	if code, b := get(plain, "api", "/"); code != http.StatusBadGateway || !strings.Contains(b, "certificate") {
		t.Errorf("route to an upstream of an untrusted CA: %d %q; want 502 naming the certificate", code, b)
	}
	noRequest("untrusted CA")

	var verdicts []Verdict
	for _, d := range append(r.log.Recent(sandboxID, 0, 100), plain.log.Recent(sandboxID, 0, 100)...) {
		verdicts = append(verdicts, d.Verdict)
		if strings.Contains(fmt.Sprintf("%+v", d), apiKey) {
			t.Errorf("the egress log shows the secret: %+v", d)
		}
	}
	if len(verdicts) != 5 {
		t.Errorf("egress log verdicts %v; want 5 decisions", verdicts)
	}
	for _, d := range r.dialer.calls() {
		if d != fmt.Sprintf("127.0.0.1:%d", port) {
			t.Errorf("the gateway dialed %s", d)
		}
	}
}
