package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sbxedge/sbx/activity/memstore"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/tick"
)

// idleStore offers one ready sandbox to the idle detector and records,
// instead of making, each suspension it starts: the row is locked for
// the transition, and the transaction then refused.
type idleStore struct {
	store.Store // nil: a call outside IdleCandidates/InTx panics

	mu       sync.Mutex
	cand     store.IdleCandidate
	suspends []time.Time
}

var errNotInThisTest = errors.New("transition not made in this test")

func (s *idleStore) IdleCandidates(context.Context) ([]store.IdleCandidate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return []store.IdleCandidate{s.cand}, nil
}

func (s *idleStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	return fn(idleTx{s: s})
}

type idleTx struct {
	store.Tx // nil: a call outside SandboxForUpdate panics
	s        *idleStore
}

func (tx idleTx) SandboxForUpdate(_ context.Context, id string) (store.Sandbox, error) {
	tx.s.mu.Lock()
	defer tx.s.mu.Unlock()
	tx.s.suspends = append(tx.s.suspends, time.Now())
	return store.Sandbox{}, errNotInThisTest
}

func (s *idleStore) attempts() []time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]time.Time(nil), s.suspends...)
}

// idleSuspender makes the provider one that can offload sandboxes.
type idleSuspender struct{ provider.Provider }

func (idleSuspender) Suspend(context.Context, string) error { return nil }
func (idleSuspender) Restore(context.Context, provider.Spec) (provider.Endpoint, error) {
	return provider.Endpoint{}, nil
}

// TestIdleDetectorClock runs the idle detector on synctest's fake clock,
// called every IdleCheckInterval as its periodic job calls it: a sandbox
// is suspended at the first check at or past its idle timeout since its
// last use and not a check earlier; a use restarts the count; an open
// connection keeps it however long; an account's shorter timeout wins.
func TestIdleDetectorClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			timeout = 15 * time.Minute
			every   = time.Minute // a whole number of checks per timeout
		)
		act := memstore.New(time.Now)
		defer act.Close()
		start := time.Now()
		st := &idleStore{cand: store.IdleCandidate{SandboxID: "sbx-1", AccountID: "a", ComputeSince: start}}
		m := &Manager{
			cfg:   Config{IdleTimeout: timeout, IdleCheckInterval: every},
			store: st, prov: idleSuspender{}, act: act, now: time.Now,
			log: slog.New(slog.DiscardHandler),
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan struct{})
		go func() {
			defer close(done)
			tick.Every(ctx, every, func() bool {
				if err := m.CheckIdle(ctx); err != nil && !errors.Is(err, errNotInThisTest) {
					t.Errorf("idle check: %v", err)
				}
				return true
			})
		}()
		suspended := func(when string, want int) []time.Time {
			t.Helper()
			synctest.Wait()
			got := st.attempts()
			if len(got) != want {
				t.Fatalf("%s (%v in): %d suspensions, want %d", when, time.Since(start), len(got), want)
			}
			return got
		}

		time.Sleep(timeout - every)
		suspended("one check before the timeout", 0)
		time.Sleep(every)
		if at := suspended("at the timeout", 1); !at[0].Equal(start.Add(timeout)) {
			t.Fatalf("suspended %v after start, want %v", at[0].Sub(start), timeout)
		}

		// Used half a check after that: idle again from the mark.
		time.Sleep(every / 2)
		act.Mark("sbx-1")
		used := time.Now()
		time.Sleep(timeout - every/2)
		suspended("the last check short of the timeout since its use", 1)
		time.Sleep(every)
		if at := suspended("the first check past it", 2); at[1].Sub(used) < timeout || at[1].Sub(used) >= timeout+every {
			t.Fatalf("suspended %v after its use, want within a check past %v", at[1].Sub(used), timeout)
		}

		// An open connection keeps it, with no marks.
		closeConn := act.Open("sbx-1")
		time.Sleep(5 * timeout)
		suspended("an open connection", 2)
		closeConn()
		closed := time.Now()

		// The account's timeout is shorter than the default.
		st.mu.Lock()
		st.cand.IdleTimeout = 5 * time.Minute
		st.mu.Unlock()
		time.Sleep(5*time.Minute - every)
		suspended("a check before the account's timeout", 2)
		time.Sleep(every)
		if at := suspended("the account's timeout", 3); at[2].Sub(closed) != 5*time.Minute {
			t.Fatalf("suspended %v after the connection closed, want %v", at[2].Sub(closed), 5*time.Minute)
		}

		cancel()
		<-done
	})
}
