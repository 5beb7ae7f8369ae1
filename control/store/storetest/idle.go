package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testIdle(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedAccounts(t, s, "a", "b")
	ready := sandbox("a", "sb-ready", t0)
	ready.State = store.StateReady
	other := sandbox("b", "sb-other", t0)
	other.State = store.StateReady
	suspended := sandbox("a", "sb-suspended", t0)
	suspended.State = store.StateSuspended
	noSession := sandbox("a", "sb-nosession", t0)
	noSession.State = store.StateReady
	insertSandboxes(t, s, ready, other, suspended, noSession)
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error {
				_, err := tx.OpenSession(ctx, session(ready, store.SessionCompute, t0.Add(time.Minute)))
				return err
			},
			func(ctx context.Context, tx store.Tx) error {
				_, err := tx.OpenSession(ctx, session(other, store.SessionCompute, t0.Add(2*time.Minute)))
				return err
			},
			func(ctx context.Context, tx store.Tx) error {
				_, err := tx.OpenSession(ctx, session(suspended, store.SessionStorage, t0))
				return err
			},
			func(ctx context.Context, tx store.Tx) error {
				return tx.SetAccountIdleTimeout(ctx, "b", 90*time.Second)
			},
		)
	})

	got, err := s.IdleCandidates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wantEqual(t, "idle candidates", got, []store.IdleCandidate{
		{SandboxID: "sb-ready", AccountID: "a", ComputeSince: t0.Add(time.Minute)},
		{SandboxID: "sb-other", AccountID: "b", ComputeSince: t0.Add(2 * time.Minute), IdleTimeout: 90 * time.Second},
	})
	for _, c := range []struct {
		account string
		want    time.Duration
	}{{"a", 0}, {"b", 90 * time.Second}} {
		d, err := s.AccountIdleTimeout(ctx, c.account)
		if err != nil || d != c.want {
			t.Errorf("AccountIdleTimeout(%s) = %v, %v; want %v", c.account, d, err, c.want)
		}
	}
	_, err = s.AccountIdleTimeout(ctx, "nobody")
	wantErr(t, "idle timeout of unknown account", err, store.ErrNotFound)

	// Clearing the override, and an unknown account.
	inTx(t, s, func(tx store.Tx) error { return tx.SetAccountIdleTimeout(ctx, "b", 0) })
	if d, _ := s.AccountIdleTimeout(ctx, "b"); d != 0 {
		t.Errorf("after clearing: got %v, want 0", d)
	}
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.SetAccountIdleTimeout(ctx, "nobody", time.Minute) })
	wantErr(t, "set idle timeout of unknown account", err, store.ErrNotFound)
}
