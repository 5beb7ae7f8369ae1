package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// testLiveCounter checks the per-account count that admission reads
// (CountHoldingPods, LockAccountHolding) against the sandboxes' states
// after every kind of write that moves it: inserts in every state, every
// state change from every state to every other, several changes to one
// sandbox in one transaction, a rolled-back transaction, and a read in the
// middle of a transaction (its own changes count).
func testLiveCounter(t *testing.T, ctx context.Context, s store.Store) {
	check := func(step string) {
		t.Helper()
		checkHolding(t, ctx, s, step, "a", "b", "none")
	}
	check("empty")

	// Every state, inserted.
	var sbs []store.Sandbox
	i := 0
	next := func(acct string, st store.State) store.Sandbox {
		i++
		sb := sandbox(acct, fmt.Sprintf("lc-%03d", i), t0.Add(time.Duration(i)*time.Second))
		sb.State = st
		return sb
	}
	for _, st := range store.States {
		sbs = append(sbs, next("a", st), next("b", st))
	}
	insertSandboxes(t, s, sbs...)
	check("inserts in every state")

	// Every change of state, one sandbox per (from, to), each in its own
	// transaction: a path that misses one pair shows here.
	type move struct {
		sb store.Sandbox
		to store.State
	}
	var moves []move
	for _, from := range store.States {
		for _, to := range store.States {
			if from != to {
				moves = append(moves, move{next("a", from), to})
			}
		}
	}
	for _, mv := range moves {
		insertSandboxes(t, s, mv.sb)
	}
	check("inserts before the moves")
	for _, mv := range moves {
		inTx(t, s, func(tx store.Tx) error {
			sb, err := tx.SandboxForUpdate(ctx, mv.sb.ID)
			if err != nil {
				return err
			}
			sb.State = mv.to
			return tx.UpdateSandbox(ctx, sb)
		})
		// Not after every move (56 of them): a wrong pair still leaves
		// the count off at the end, and the per-pair check is kept for
		// the pairs that cross the line, where a wrong one shows first.
		if slices.Contains(store.PodStates, mv.sb.State) != slices.Contains(store.PodStates, mv.to) {
			check(fmt.Sprintf("%s -> %s", mv.sb.State, mv.to))
		}
	}
	check("every move")

	// An update that leaves the state as it was, and one that writes
	// other fields only.
	inTx(t, s, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, sbs[0].ID)
		if err != nil {
			return err
		}
		sb.Endpoint = "127.0.0.1:22"
		return tx.UpdateSandbox(ctx, sb)
	})
	check("update without a state change")

	// Several changes to one sandbox, and reads in between, in one
	// transaction: the transaction's own changes count at once, and the
	// committed total is the sum of them all.
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, "a"); err != nil {
			return err
		}
		before, err := tx.CountHoldingPods(ctx, "a")
		if err != nil {
			return err
		}
		sb := next("a", store.StatePending)
		steps := []struct {
			st    store.State
			delta int
		}{{store.StatePending, 1}, {store.StateReady, 1}, {store.StateSuspended, 0}, {store.StateRestoring, 1}, {store.StateTerminated, 0}}
		for k, step := range steps {
			sb.State = step.st
			if k == 0 {
				err = tx.InsertSandbox(ctx, sb)
			} else {
				err = tx.UpdateSandbox(ctx, sb)
			}
			if err != nil {
				return err
			}
			got, err := tx.CountHoldingPods(ctx, "a")
			if err != nil {
				return err
			}
			if got != before+step.delta {
				t.Errorf("inside the transaction, after moving to %s: counted %d, want %d", step.st, got, before+step.delta)
			}
		}
		// And one more insert, read by the admission call alone.
		if err := tx.InsertSandbox(ctx, next("a", store.StateReady)); err != nil {
			return err
		}
		_, got, err := tx.LockAccountHolding(ctx, "a")
		if err != nil {
			return err
		}
		if got != before+1 {
			t.Errorf("LockAccountHolding after its own insert: %d, want %d", got, before+1)
		}
		return nil
	})
	check("one transaction's several changes")

	// A rolled-back transaction counts for nothing, even after its
	// changes were applied to the counter inside it.
	errBack := errors.New("roll back")
	err := s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, "a"); err != nil {
			return err
		}
		if err := tx.InsertSandbox(ctx, next("a", store.StateReady)); err != nil {
			return err
		}
		sb, err := tx.SandboxForUpdate(ctx, sbs[2].ID) // a's ready one
		if err != nil {
			return err
		}
		sb.State = store.StateTerminating
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		if _, err := tx.CountHoldingPods(ctx, "a"); err != nil {
			return err
		}
		if err := tx.InsertSandbox(ctx, next("b", store.StatePending)); err != nil {
			return err
		}
		return errBack
	})
	wantErr(t, "rolled-back transaction", err, errBack)
	check("rollback")
}

// checkHolding fails the test unless CountHoldingPods and
// LockAccountHolding read, for each of accts, its count of sandboxes in
// store.PodStates.
func checkHolding(t *testing.T, ctx context.Context, s store.Store, step string, accts ...string) {
	t.Helper()
	for _, acct := range accts {
		want := realHolding(t, ctx, s, acct)
		var n, m int
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.LockAccount(ctx, acct); err != nil {
				return err
			}
			var err error
			if n, err = tx.CountHoldingPods(ctx, acct); err != nil {
				return err
			}
			if acct == "none" {
				m = want
				return nil
			}
			_, m, err = tx.LockAccountHolding(ctx, acct)
			return err
		})
		if n != want || m != want {
			t.Fatalf("%s: account %s: CountHoldingPods %d, LockAccountHolding %d; its sandboxes in PodStates: %d", step, acct, n, m, want)
		}
	}
}

// RunLiveCounterRaw checks the live-sandbox counter across what the
// store's own writes never do: a sandbox row deleted, and the counter's
// migration applied over existing sandboxes (its backfill). open opens
// the same database each call (closing is left to the test's cleanup);
// exec runs statements on it behind the store's back; unmigrate undoes the
// counter's migration (its table, triggers and schema_migrations row) so
// that the next open applies it again.
func RunLiveCounterRaw(t *testing.T, open func(t *testing.T) store.Store, exec func(t *testing.T, stmts ...string), unmigrate []string) {
	ctx := t.Context()
	s := open(t)
	seedAccounts(t, s, "a", "b")
	var sbs []store.Sandbox
	for i, st := range store.States {
		for _, acct := range []string{"a", "b"} {
			sb := sandbox(acct, fmt.Sprintf("raw-%s-%d", acct, i), t0.Add(time.Duration(i)*time.Second))
			sb.State = st
			sbs = append(sbs, sb)
		}
	}
	insertSandboxes(t, s, sbs...)
	checkHolding(t, ctx, s, "inserted", "a", "b")

	// a's pending and terminated ones, b's ready one.
	exec(t, `DELETE FROM sandboxes WHERE id IN ('raw-a-0', 'raw-a-6', 'raw-b-1')`)
	checkHolding(t, ctx, s, "rows deleted", "a", "b")

	// The migration again, over these rows: its backfill counts them.
	exec(t, unmigrate...)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	s = open(t)
	checkHolding(t, ctx, s, "migrated over existing rows", "a", "b")
	// And the triggers it made count from there.
	insertSandboxes(t, s, sandbox("a", "raw-after", t0))
	checkHolding(t, ctx, s, "insert after the migration", "a", "b")
}

// realHolding counts acct's sandboxes in store.PodStates from the rows.
func realHolding(t *testing.T, ctx context.Context, s store.Store, acct string) int {
	t.Helper()
	const page = 1000
	list, err := s.Sandboxes(ctx, store.ListOptions{AccountID: acct, Limit: page})
	if err != nil {
		t.Fatalf("Sandboxes(%s): %v", acct, err)
	}
	if len(list) == page {
		t.Fatalf("Sandboxes(%s): a full page; count more", acct)
	}
	n := 0
	for _, sb := range list {
		if slices.Contains(store.PodStates, sb.State) {
			n++
		}
	}
	return n
}
