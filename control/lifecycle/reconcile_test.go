package lifecycle_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store/sqlite"
)

// orphanProvider holds pods no sandbox row owns, and counts the passes
// that list them.
type orphanProvider struct {
	provider.Provider // nil: a call outside List/Status/Destroy panics
	mu                sync.Mutex
	pods              map[string]bool
	lists             int
}

func (p *orphanProvider) List(context.Context) ([]provider.Instance, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lists++
	var out []provider.Instance
	for id := range p.pods {
		out = append(out, provider.Instance{SandboxID: id, Phase: provider.PhaseRunning})
	}
	return out, nil
}

func (p *orphanProvider) Destroy(_ context.Context, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.pods, id)
	return nil
}

func (p *orphanProvider) add(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.pods[id] = true
}

func (p *orphanProvider) state() (lists, pods int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lists, len(p.pods)
}

// TestReconcileEveryClock runs the periodic reconcile on synctest's fake
// clock: no pass before the first interval, one pass per interval after
// it, an orphan that appears between passes destroyed by the next one,
// and the loop's goroutine gone once its context ends.
func TestReconcileEveryClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = time.Minute
		st, err := sqlite.Open(t.Context(), t.TempDir()+"/sbx.db", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		prov := &orphanProvider{pods: map[string]bool{}}
		m := lifecycle.New(lifecycle.Config{ReconcileInterval: every}, lifecycle.Deps{Store: st, Provider: prov})

		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			m.ReconcileEvery(ctx)
		}()
		check := func(at string, wantLists, wantPods int) {
			t.Helper()
			synctest.Wait()
			if lists, pods := prov.state(); lists != wantLists || pods != wantPods {
				t.Errorf("%s: %d passes, %d pods left; want %d passes, %d pods", at, lists, pods, wantLists, wantPods)
			}
		}

		prov.add("sbx-orphan-1")
		check("at start", 0, 1)
		time.Sleep(every - time.Second)
		check("just before the first interval", 0, 1)
		time.Sleep(time.Second)
		check("at the first interval", 1, 0)

		time.Sleep(every / 2)
		prov.add("sbx-orphan-2")
		check("an orphan between passes", 1, 1)
		time.Sleep(every / 2)
		check("the next pass", 2, 0)
		time.Sleep(3 * every)
		check("three intervals later", 5, 0)

		cancel()
		<-done
		time.Sleep(2 * every)
		check("after stop", 5, 0)
	})
}
