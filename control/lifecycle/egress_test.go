package lifecycle_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

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
