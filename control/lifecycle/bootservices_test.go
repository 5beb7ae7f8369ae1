package lifecycle_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/provider/local"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/podssh"
)

// countingPods stands for the pod connection pool: it counts the calls
// that would reach a sandbox's init (control's push of its services) and
// reaches nothing.
type countingPods struct{ calls atomic.Int32 }

func (p *countingPods) Client(context.Context, podssh.Target) (*ssh.Client, error) {
	p.calls.Add(1)
	return nil, errors.New("test: no pods")
}

// bootProvider is the local provider, whose endpoint says when it started
// the spec's Services; quiet hides that, as a provider that does not hand
// them over, and onRestore runs at the start of each Restore.
type bootProvider struct {
	*local.Local
	quiet     atomic.Bool
	onRestore atomic.Pointer[func(provider.Spec)]
	restored  atomic.Pointer[provider.Spec] // the last Restore's spec
}

func (p *bootProvider) Provision(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	ep, err := p.Local.Provision(ctx, spec)
	ep.ServicesStarted = ep.ServicesStarted && !p.quiet.Load()
	return ep, err
}

func (p *bootProvider) Restore(ctx context.Context, spec provider.Spec) (provider.Endpoint, error) {
	p.restored.Store(&spec)
	if f := p.onRestore.Load(); f != nil {
		(*f)(spec)
	}
	ep, err := p.Local.Restore(ctx, spec)
	ep.ServicesStarted = ep.ServicesStarted && !p.quiet.Load()
	return ep, err
}

// TestServicesStartedByTheProviderAreNotPushed: a provider that says it
// started the declared services with the sandbox (create and wake) spares
// control its push to the sandbox's init before ready; a declaration
// changed while suspended reaches the provider at the restore and is not
// pushed either; one changed during the restore, after the provider was
// handed the set, is pushed; and a provider that does not say so gets
// the push, as before.
func TestServicesStartedByTheProviderAreNotPushed(t *testing.T) {
	for _, backend := range backends {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pods := &countingPods{}
			var prov *bootProvider
			h := newHarness(t, backend, lifecycle.Config{ReapInterval: time.Second},
				func(p provider.Provider) provider.Provider {
					prov = &bootProvider{Local: p.(*local.Local)}
					return prov
				},
				func(d *lifecycle.Deps) { d.Pods = pods })
			app := lifecycle.ServiceSpec{Name: "app", Command: "sleep 600", Env: map[string]string{"V": "1"}}
			minutes := 30
			sb, _, err := h.m.Create(ctx, h.acct, lifecycle.CreateRequest{
				Profile: "tuist-linux-small", DeadlineMinutes: &minutes, Services: []lifecycle.ServiceSpec{app},
			})
			if err != nil {
				t.Fatal(err)
			}
			h.waitState(t, sb.ID, store.StateReady, stateCeiling)
			pushes := func(when string, want int32) {
				t.Helper()
				if n := pods.calls.Load(); n != want {
					t.Fatalf("%s: %d pushes to the init in all, want %d", when, n, want)
				}
			}
			pushes("created", 0)
			// suspendWake suspends the sandbox, runs then, and wakes it.
			suspendWake := func(then func()) {
				t.Helper()
				if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
					t.Fatal(err)
				}
				h.waitState(t, sb.ID, store.StateSuspended, stateCeiling)
				then()
				wctx, cancel := context.WithTimeout(ctx, stateCeiling)
				defer cancel()
				if err := h.m.Wake(wctx, sb.ID); err != nil {
					t.Fatal(err)
				}
			}

			// Changed while suspended: the restore hands over the new set.
			suspendWake(func() {
				app.Env["V"] = "2"
				if _, err := h.m.PutService(ctx, h.acct, sb.ID, app); err != nil {
					t.Fatal(err)
				}
			})
			if got := prov.restored.Load().Services; len(got) != 1 || got[0].Env["V"] != "2" {
				t.Fatalf("the restore was handed %+v, want app with V=2", got)
			}
			pushes("woken with the set changed while suspended", 0)

			// Changed during the restore: the provider started the old set.
			hook := func(provider.Spec) {
				sv := app
				sv.Env = map[string]string{"V": "3"}
				if _, err := h.m.PutService(ctx, h.acct, sb.ID, sv); err != nil {
					t.Error(err)
				}
			}
			prov.onRestore.Store(&hook)
			suspendWake(func() {})
			pushes("woken with the set changed during the restore", 1)
			prov.onRestore.Store(nil)

			// A provider that does not say it started them.
			prov.quiet.Store(true)
			suspendWake(func() {})
			pushes("woken by a provider that does not say", 2)
		})
	}
}
