package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// guardDialer dials loopback only. Asked for anything else, it fails the
// test without sending a packet: no test may reach past 127.0.0.0/8 and
// ::1. It also fails on a name, since the gateway must dial only the
// address it checked.
type guardDialer struct {
	t      testing.TB
	mu     sync.Mutex
	dialed []string
}

func (d *guardDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		d.t.Errorf("gateway dialed %q, which is not an IP address and port", address)
		return nil, errors.New("guard: not an address")
	}
	if !ap.Addr().Unmap().IsLoopback() {
		d.t.Errorf("gateway dialed %s, outside loopback", address)
		return nil, errors.New("guard: refused outside loopback")
	}
	d.mu.Lock()
	d.dialed = append(d.dialed, address)
	d.mu.Unlock()
	return (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
}

func (d *guardDialer) calls() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.dialed...)
}

// fakeResolver answers from a table; a name may answer differently on
// each lookup (the n-th answer, the last one repeating).
type fakeResolver struct {
	mu      sync.Mutex
	answers map[string][][]netip.Addr
	lookups map[string]int
}

func newResolver() *fakeResolver {
	return &fakeResolver{answers: map[string][][]netip.Addr{}, lookups: map[string]int{}}
}

func (r *fakeResolver) set(name string, answers ...[]string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.answers[name] = nil
	for _, a := range answers {
		var addrs []netip.Addr
		for _, s := range a {
			addrs = append(addrs, netip.MustParseAddr(s))
		}
		r.answers[name] = append(r.answers[name], addrs)
	}
}

func (r *fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.lookups[host]
	r.lookups[host]++
	a := r.answers[host]
	if len(a) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return a[min(n, len(a)-1)], nil
}

func (r *fakeResolver) count(host string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lookups[host]
}

// fakeSandboxes holds one credential and policy per sandbox.
type fakeSandboxes struct {
	mu       sync.Mutex
	secrets  map[string]string
	policies map[string]*egresspolicy.Policy
}

func (f *fakeSandboxes) EgressPolicy(_ context.Context, id, secret string) (*egresspolicy.Policy, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if s, ok := f.secrets[id]; !ok || s != secret {
		return nil, fmt.Errorf("sandbox %s: %w", id, ErrUnauthorized)
	}
	return f.policies[id], nil
}

func (f *fakeSandboxes) setPolicy(id string, p *egresspolicy.Policy) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.policies[id] = p
}

// rig is a gateway on a loopback listener with its fakes.
type rig struct {
	gw        *Gateway
	url       string // the proxy's http://host:port
	dialer    *guardDialer
	resolver  *fakeResolver
	sandboxes *fakeSandboxes
	log       *MemoryLog
	reg       *prometheus.Registry
}

const (
	sandboxID = "sbx-egress-test"
	secret    = "sbx_pc_test-secret"
)

func allow(entries ...string) *egresspolicy.Policy {
	return egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: entries})
}

func mode(m egresspolicy.Mode) *egresspolicy.Policy {
	return egresspolicy.MustParse(egresspolicy.Spec{Egress: m})
}

// newRig starts a gateway for one sandbox with policy p and ranges rc;
// opts change its Config before it is built.
func newRig(t testing.TB, p *egresspolicy.Policy, rc egresspolicy.RangesConfig, opts ...func(*Config)) *rig {
	t.Helper()
	ranges, err := egresspolicy.NewRanges(rc)
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{
		dialer:    &guardDialer{t: t},
		resolver:  newResolver(),
		sandboxes: &fakeSandboxes{secrets: map[string]string{sandboxID: secret}, policies: map[string]*egresspolicy.Policy{sandboxID: p}},
		log:       &MemoryLog{},
		reg:       prometheus.NewRegistry(),
	}
	cfg := Config{
		Sandboxes: r.sandboxes, Ranges: ranges, Resolver: r.resolver, Dialer: r.dialer,
		Log: r.log, Metrics: r.reg,
	}
	for _, o := range opts {
		o(&cfg)
	}
	r.gw, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(r.gw)
	t.Cleanup(func() {
		r.gw.Close()
		srv.Close()
	})
	r.url = srv.URL
	return r
}

// loopback is the trust list that lets tests reach their upstreams.
var loopback = egresspolicy.RangesConfig{Trust: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}

// upstream is a plain HTTP server on loopback answering "hello from
// upstream"; it returns its port.
func upstream(t testing.TB) uint16 {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "hello from upstream")
	}))
	t.Cleanup(srv.Close)
	return netip.MustParseAddrPort(srv.Listener.Addr().String()).Port()
}
