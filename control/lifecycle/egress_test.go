package lifecycle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
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
