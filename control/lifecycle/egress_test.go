package lifecycle_test

import (
	"context"
	"errors"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
)

func TestProxyCredential(t *testing.T) {
	t.Parallel()
	locked := egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"github.com"}})
	h := newHarness(t, "sqlite", lifecycle.Config{Network: map[string]*egresspolicy.Policy{"tuist-linux-small": locked}}, nil)
	ctx := context.Background()
	sb := h.create(t, 30)
	h.waitState(t, sb.ID, store.StateReady, 10*time.Second)
	other := h.create(t, 30)

	secret, err := h.m.ProxyCredential(sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := h.m.ProxyCredential(sb.ID)
	otherSecret, _ := h.m.ProxyCredential(other.ID)
	if secret != again || secret == otherSecret || !strings.HasPrefix(secret, "sbx_px_") {
		t.Fatalf("credentials %q, %q (again), %q (other sandbox): want one stable sbx_px_ secret per sandbox", secret, again, otherSecret)
	}
	p, err := h.m.EgressPolicy(ctx, sb.ID, secret)
	if err != nil || !p.Equal(locked) {
		t.Fatalf("EgressPolicy = %v, %v; want the profile's allowlist", p, err)
	}
	for name, c := range map[string]struct{ id, secret string }{
		"other sandbox's secret": {sb.ID, otherSecret},
		"for the other sandbox":  {other.ID, secret},
		"malformed":              {sb.ID, "sbx_px_short"},
		"grant prefix":           {sb.ID, "sbx_gt_" + strings.TrimPrefix(secret, "sbx_px_")},
		"unknown sandbox":        {"sbx-nope", secret},
	} {
		if _, err := h.m.EgressPolicy(ctx, c.id, c.secret); !errors.Is(err, lifecycle.ErrProxyCredential) {
			t.Errorf("%s: EgressPolicy error %v, want ErrProxyCredential", name, err)
		}
	}
	h.clock.Advance(31 * time.Minute)
	if _, err := h.m.EgressPolicy(ctx, sb.ID, secret); !errors.Is(err, lifecycle.ErrProxyCredential) {
		t.Errorf("past the deadline: %v, want ErrProxyCredential", err)
	}
	h.clock.Advance(-31 * time.Minute)
	if _, err := h.m.Delete(ctx, h.acct, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.EgressPolicy(ctx, sb.ID, secret); !errors.Is(err, lifecycle.ErrProxyCredential) {
		t.Errorf("after delete: %v, want ErrProxyCredential", err)
	}
}

// specRecorder keeps the last spec provisioned.
type specRecorder struct {
	provider.Provider
	mu   sync.Mutex
	last provider.Spec
}

func (r *specRecorder) Provision(ctx context.Context, s provider.Spec) (provider.Endpoint, error) {
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
	return r.Provider.Provision(ctx, s)
}

// TestProxyEnv: with an egress gateway configured, every sandbox's spec
// carries the proxy variables with its own credential, which EgressPolicy
// accepts; without one, none.
func TestProxyEnv(t *testing.T) {
	t.Parallel()
	for _, gateway := range []string{"127.0.0.1:3128", ""} {
		var rec *specRecorder
		h := newHarness(t, "sqlite", lifecycle.Config{EgressProxy: gateway}, func(p provider.Provider) provider.Provider {
			rec = &specRecorder{Provider: p}
			return rec
		})
		sb := h.create(t, 30)
		h.waitState(t, sb.ID, store.StateReady, 10*time.Second)
		rec.mu.Lock()
		env := rec.last.Env
		rec.mu.Unlock()
		if gateway == "" {
			if len(env) != 0 {
				t.Errorf("without a gateway the spec carries %d variables", len(env))
			}
			continue
		}
		vars := map[string]string{}
		for _, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			vars[k] = v
		}
		proxy := vars["HTTPS_PROXY"]
		for _, k := range []string{"HTTP_PROXY", "http_proxy", "https_proxy"} {
			if vars[k] != proxy {
				t.Errorf("%s = %q, want it equal to HTTPS_PROXY", k, vars[k])
			}
		}
		if vars["NO_PROXY"] == "" || vars["no_proxy"] != vars["NO_PROXY"] {
			t.Errorf("NO_PROXY %q, no_proxy %q", vars["NO_PROXY"], vars["no_proxy"])
		}
		u, err := url.Parse(proxy)
		if err != nil || u.Host != gateway || u.User.Username() != sb.ID {
			t.Fatalf("proxy URL %q, want http://%s:<secret>@%s", proxy, sb.ID, gateway)
		}
		secret, _ := u.User.Password()
		if _, err := h.m.EgressPolicy(context.Background(), sb.ID, secret); err != nil {
			t.Errorf("the env's credential is refused: %v", err)
		}
	}
}

// publishes records the sandboxes whose change was published.
type publishes struct {
	lifecycle.Activity
	mu  sync.Mutex
	ids []string
}

func (p *publishes) Publish(ctx context.Context, id string) error {
	p.mu.Lock()
	p.ids = append(p.ids, id)
	p.mu.Unlock()
	return p.Activity.Publish(ctx, id)
}

func (p *publishes) count(id string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, x := range p.ids {
		if x == id {
			n++
		}
	}
	return n
}

// TestSandboxNetwork: a create may narrow its profile's policy, and one
// that widens it is a field error naming the entry; a PATCH replaces the
// policy, EgressPolicy answers with the new one at once, the change is
// published for the edges and recorded as an event, and a PATCH cannot
// widen past the profile either.
func TestSandboxNetwork(t *testing.T) {
	t.Parallel()
	profile := egresspolicy.MustParse(egresspolicy.Spec{Egress: egresspolicy.Allowlist, Allow: []string{"*.example.com", "github.com"}})
	pub := &publishes{Activity: memstore.New(time.Now)}
	var labels *egressLabels
	h := newHarness(t, "sqlite", lifecycle.Config{Network: map[string]*egresspolicy.Policy{"tuist-linux-small": profile}},
		func(p provider.Provider) provider.Provider { labels = &egressLabels{Provider: p}; return labels },
		func(d *lifecycle.Deps) { d.Activity = pub })
	ctx := context.Background()
	allow := func(mode egresspolicy.Mode, entries ...string) *egresspolicy.Spec {
		return &egresspolicy.Spec{Egress: mode, Allow: entries}
	}

	for name, c := range map[string]struct {
		spec  *egresspolicy.Spec
		field string
	}{
		"entry outside the profile": {allow(egresspolicy.Allowlist, "api.example.com", "evil.test"), "network.allow[1]"},
		"open":                      {allow(egresspolicy.Open), "network.egress"},
		"unparsable entry":          {allow(egresspolicy.Allowlist, "a b"), "network.allow[0]"},
		"unknown mode":              {allow("some"), "network.egress"},
	} {
		_, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", Network: c.spec})
		var fe *lifecycle.FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%s: create error %v, want a field error on %s", name, err, c.field)
		}
	}

	sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{Profile: "tuist-linux-small", Network: allow(egresspolicy.Allowlist, "api.example.com:443")})
	if err != nil {
		t.Fatal(err)
	}
	secret, _ := h.m.ProxyCredential(sb.ID)
	policy := func() *egresspolicy.Policy {
		t.Helper()
		p, err := h.m.EgressPolicy(ctx, sb.ID, secret)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := policy().Entries(); len(got) != 1 || got[0] != "api.example.com:443" {
		t.Fatalf("policy after a narrowing create: %v", got)
	}
	if got := h.m.SandboxNetwork(sb).Spec(); got.Egress != egresspolicy.Allowlist {
		t.Errorf("SandboxNetwork of the created row: %+v", got)
	}

	before := pub.count(sb.ID)
	if _, err := h.m.Patch(ctx, h.acct, sb.ID, lifecycle.Patch{Network: allow(egresspolicy.None)}); err != nil {
		t.Fatal(err)
	}
	if m := policy().Mode(); m != egresspolicy.None {
		t.Errorf("policy after PATCH none: %s", m)
	}
	if pub.count(sb.ID) != before+1 {
		t.Errorf("the PATCH published %d changes, want 1", pub.count(sb.ID)-before)
	}
	if got := labels.calls(); len(got) != 1 || got[0] != sb.ID+"=none" {
		t.Errorf("the provider was told %v; want the sandbox's pod set to none", got)
	}
	_, err = h.m.Patch(ctx, h.acct, sb.ID, lifecycle.Patch{Network: allow(egresspolicy.Allowlist, "gitlab.com")})
	var fe *lifecycle.FieldError
	if !errors.As(err, &fe) || fe.Field != "network.allow[0]" || !strings.Contains(fe.Detail, "gitlab.com") {
		t.Errorf("widening PATCH: %v, want a field error naming gitlab.com", err)
	}
	if m := policy().Mode(); m != egresspolicy.None {
		t.Errorf("a refused PATCH changed the policy to %s", m)
	}
	events, err := h.st.Events(ctx, sb.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, e := range events {
		found = found || (e.Type == "settings" && strings.Contains(e.Message, "network=none"))
	}
	if !found {
		t.Errorf("no settings event for the network change in %+v", events)
	}
}

// egressLabels is a provider that enforces the egress mode below the
// proxy, recording what it was told.
type egressLabels struct {
	provider.Provider
	mu   sync.Mutex
	seen []string
}

func (e *egressLabels) SetEgress(_ context.Context, id, mode string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.seen = append(e.seen, id+"="+mode)
	return nil
}

func (e *egressLabels) calls() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.seen)
}
