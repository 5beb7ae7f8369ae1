package lifecycle

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// leaseStore holds one sandbox row in memory: the part of the store a
// restore lease's renewal uses, so that it runs on synctest's clock.
type leaseStore struct {
	store.Store // nil: a call outside InTx panics

	mu      sync.Mutex
	sb      store.Sandbox
	renews  []time.Time
	lapsed  []time.Duration // how long a lease had lapsed when renewed
	failing bool            // InTx fails, as with the database away
}

func (s *leaseStore) InTx(ctx context.Context, fn func(store.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing {
		return errors.New("database unreachable")
	}
	return fn(leaseTx{s: s})
}

// leaseTx is a transaction on a leaseStore; its caller holds the mutex.
type leaseTx struct {
	store.Tx // nil: a call outside SandboxForUpdate/UpdateSandbox panics
	s        *leaseStore
}

func (tx leaseTx) SandboxForUpdate(ctx context.Context, id string) (store.Sandbox, error) {
	return tx.s.sandboxForUpdate(ctx, id)
}

func (tx leaseTx) UpdateSandbox(ctx context.Context, sb store.Sandbox) error {
	return tx.s.updateSandbox(ctx, sb)
}

func (s *leaseStore) sandboxForUpdate(_ context.Context, id string) (store.Sandbox, error) {
	if id != s.sb.ID {
		return store.Sandbox{}, store.ErrNotFound
	}
	return s.sb, nil
}

func (s *leaseStore) updateSandbox(_ context.Context, sb store.Sandbox) error {
	now := time.Now()
	if !now.Before(*s.sb.LeaseUntil) {
		s.lapsed = append(s.lapsed, now.Sub(*s.sb.LeaseUntil))
	}
	s.sb = sb
	s.renews = append(s.renews, now)
	return nil
}

func (s *leaseStore) read() (sb store.Sandbox, renews int, lapsed []time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sb, len(s.renews), append([]time.Duration(nil), s.lapsed...)
}

func (s *leaseStore) edit(f func(sb *store.Sandbox)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.sb)
}

// TestHoldLeaseClock runs a restore lease's renewer on synctest's fake
// clock: renewed every third of a lease and not before, so however long
// the provider works the lease never lapses, even across a store fault
// of one renewal; once another process holds it the renewer stops and
// the work goes on, and holdLease returns the work's error.
func TestHoldLeaseClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = 30 * time.Second
		m := &Manager{cfg: Config{RestoreLease: lease}, log: slog.New(slog.DiscardHandler)}
		l := restoreLease{id: "sbx-1", holder: "lease-mine", attempt: 1}
		st := &leaseStore{sb: store.Sandbox{ID: l.id, State: store.StateRestoring}}
		l.grant(&st.sb, lease)
		m.store = st
		start := time.Now()

		release := make(chan struct{})
		workErr := errors.New("restore failed")
		var workCtx context.Context
		done := make(chan error, 1)
		go func() {
			done <- m.holdLease(t.Context(), l, func(ctx context.Context) error {
				workCtx = ctx
				<-release
				return workErr
			})
		}()
		renewals := func(when string, want int) store.Sandbox {
			t.Helper()
			synctest.Wait()
			sb, n, lapsed := st.read()
			if n != want || len(lapsed) > 0 {
				t.Fatalf("%s: %d renewals, lapsed before %v; want %d, never lapsed", when, n, lapsed, want)
			}
			return sb
		}

		time.Sleep(lease/3 - time.Nanosecond)
		renewals("just before a third of the lease", 0)
		time.Sleep(time.Nanosecond)
		if sb := renewals("at a third of the lease", 1); !sb.LeaseUntil.Equal(start.Add(lease / 3).Add(lease)) {
			t.Fatalf("renewed until %v after start, want %v", sb.LeaseUntil.Sub(start), lease/3+lease)
		}

		// One renewal fails (the database is away for it): the next, a
		// third of a lease later, still comes before the lease lapses.
		st.mu.Lock()
		st.failing = true
		st.mu.Unlock()
		time.Sleep(lease / 3)
		renewals("a renewal that failed", 1)
		st.mu.Lock()
		st.failing = false
		st.mu.Unlock()
		time.Sleep(10 * lease)
		renewals("ten leases on", 1+30)

		// Another process took over (our lease lapsed as it saw it): the
		// next renewal finds the lease not ours and the renewer stops;
		// the work goes on.
		st.edit(func(sb *store.Sandbox) { sb.LeaseHolder = "lease-theirs" })
		time.Sleep(3 * lease)
		renewals("after the lease was taken", 1+30)
		if err := workCtx.Err(); err != nil {
			t.Fatalf("work cancelled when the lease was lost: %v", err)
		}
		select {
		case err := <-done:
			t.Fatalf("holdLease returned %v while its work runs", err)
		default:
		}
		close(release)
		if err := <-done; !errors.Is(err, workErr) {
			t.Fatalf("holdLease returned %v, want the work's error", err)
		}
	})
}
