package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testSandboxRoundTrip(t *testing.T, ctx context.Context, s store.Store) {
	want := store.Sandbox{
		ID: "sb-full", AccountID: "a", ProjectID: "prj-1", Profile: "small", Platform: "linux",
		State: store.StatePending, CreatedAt: t0, DeadlineAt: t0.Add(2 * time.Hour),
		Grants:         []store.Grant{{ProjectID: "prj-1", Scopes: []string{"read", "write"}}},
		IdempotencyKey: "key-1", RequestHash: "hash-1",
		Endpoint: "10.0.0.1:22", ForwardEndpoint: "10.0.0.1:2223",
		Env:         map[string]string{"GREETING": `say "hi" é`, "STAGE": "test"},
		Secrets:     []store.SecretRef{{Name: "NPM_TOKEN", As: "env"}, {Name: "KEY", As: "file"}},
		IdleTimeout: 3 * time.Minute, IgnoreBusy: true, RetentionDays: 2,
	}
	bare := sandbox("a", "sb-bare", t0)
	insertSandboxes(t, s, want, bare)

	for _, w := range []store.Sandbox{want, bare} {
		wantRead(t, "inserted sandbox", w)(s.Sandbox(ctx, w.ID))
	}

	// Every mutable field changes; identity and request fields stay.
	upd := want
	upd.ProjectID, upd.State, upd.DeadlineAt = "prj-2", store.StateTerminated, t0.Add(3*time.Hour)
	upd.ReadyAt, upd.SuspendedAt, upd.TerminatedAt = ptr(t0.Add(time.Minute)), ptr(t0.Add(2*time.Minute)), ptr(t0.Add(3*time.Minute))
	upd.EndReason, upd.Endpoint, upd.SSHUser = "explicit_delete", "127.0.0.1:2222", "sbx"
	upd.Workspace, upd.HostKey, upd.Grants = "/home/sbx", "ssh-ed25519 AAAA", nil
	upd.ForwardEndpoint = "127.0.0.1:2223"
	upd.LeaseHolder, upd.LeaseUntil, upd.RestoreAttempts = "restorer-1", ptr(t0.Add(4*time.Minute)), 2
	upd.IdleTimeout, upd.IgnoreBusy, upd.RetentionDays, upd.RetentionWarnedAt = time.Minute, false, 3, ptr(t0.Add(5*time.Minute))
	var locked store.Sandbox
	inTx(t, s, func(tx store.Tx) error {
		var err error
		if locked, err = tx.SandboxForUpdate(ctx, want.ID); err != nil {
			return err
		}
		return tx.UpdateSandbox(ctx, upd)
	})
	wantEqual(t, "SandboxForUpdate", locked, want)
	wantRead(t, "updated sandbox", upd)(s.Sandbox(ctx, want.ID))

	_, err := s.Sandbox(ctx, "missing")
	wantErr(t, "Sandbox(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.SandboxForUpdate(ctx, "missing")
		return err
	})
	wantErr(t, "SandboxForUpdate(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.UpdateSandbox(ctx, sandbox("a", "missing", t0)) })
	wantErr(t, "UpdateSandbox(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertSandbox(ctx, bare) })
	wantErr(t, "InsertSandbox with a taken id", err, store.ErrConflict)
}

func testIdempotencyKey(t *testing.T, ctx context.Context, s store.Store) {
	first := sandbox("a", "sb-1", t0)
	first.IdempotencyKey, first.RequestHash = "k", "h1"
	insertSandboxes(t, s, first)

	// The conflict leaves the transaction usable, so a retry can read the
	// original in the same transaction.
	var existing store.Sandbox
	inTx(t, s, func(tx store.Tx) error {
		dup := sandbox("a", "sb-2", t0)
		dup.IdempotencyKey = "k"
		wantErr(t, "same key, same account", tx.InsertSandbox(ctx, dup), store.ErrConflict)
		var err error
		existing, err = tx.SandboxByIdempotencyKey(ctx, "a", "k")
		return err
	})
	wantEqual(t, "sandbox by key after conflict", existing, first)

	other := sandbox("b", "sb-3", t0)
	other.IdempotencyKey = "k"
	noKey1, noKey2 := sandbox("a", "sb-4", t0), sandbox("a", "sb-5", t0)
	insertSandboxes(t, s, other, noKey1, noKey2)

	got, err := s.SandboxByIdempotencyKey(ctx, "b", "k")
	if err != nil {
		t.Fatalf("SandboxByIdempotencyKey(b, k): %v", err)
	}
	wantEqual(t, "other account's sandbox by key", got.ID, "sb-3")
	_, err = s.SandboxByIdempotencyKey(ctx, "a", "nope")
	wantErr(t, "unknown key", err, store.ErrNotFound)
	_, err = s.SandboxByIdempotencyKey(ctx, "a", "")
	wantErr(t, "empty key", err, store.ErrNotFound)
}

func testPagination(t *testing.T, ctx context.Context, s store.Store) {
	var sbs []store.Sandbox
	for i := range 7 {
		// Pairs share a creation time so the id breaks the tie.
		sb := sandbox("a", sbID(i), t0.Add(time.Duration(i/2)*time.Second))
		if i%3 == 0 {
			sb.State = store.StateTerminated
		}
		sbs = append(sbs, sb)
	}
	insertSandboxes(t, s, append(sbs, sandbox("b", "sb-other", t0.Add(time.Hour)))...)
	newestFirst := []string{"sb-06", "sb-05", "sb-04", "sb-03", "sb-02", "sb-01", "sb-00"}

	tests := []struct {
		name   string
		states []store.State
		limit  int
		want   []string
	}{
		{"all by 3", nil, 3, newestFirst},
		{"all by 1", nil, 1, newestFirst},
		{"all in one page", nil, 0, newestFirst},
		{"terminated by 2", []store.State{store.StateTerminated}, 2, []string{"sb-06", "sb-03", "sb-00"}},
		{"two states by 2", []store.State{store.StatePending, store.StateReady}, 2, []string{"sb-05", "sb-04", "sb-02", "sb-01"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			before := ""
			for page := 0; ; page++ {
				if page > 10 {
					t.Fatalf("pagination does not end; got %v", got)
				}
				list, err := s.Sandboxes(ctx, store.ListOptions{AccountID: "a", Before: before, Limit: tc.limit, States: tc.states})
				if err != nil {
					t.Fatalf("Sandboxes: %v", err)
				}
				if tc.limit > 0 && len(list) > tc.limit {
					t.Fatalf("page of %d, want at most %d", len(list), tc.limit)
				}
				if len(list) == 0 {
					break
				}
				got = append(got, ids(list)...)
				before = list[len(list)-1].ID
			}
			wantEqual(t, "ids across pages", got, tc.want)
		})
	}

	list, err := s.Sandboxes(ctx, store.ListOptions{AccountID: "a", Before: "sb-other"})
	if err != nil {
		t.Fatalf("Sandboxes with a foreign cursor: %v", err)
	}
	wantEqual(t, "page after another account's cursor", len(list), 0)
}

func testStatesAndCountLive(t *testing.T, ctx context.Context, s store.Store) {
	states := []store.State{
		store.StatePending, store.StateReady, store.StateSuspending, store.StateSuspended,
		store.StateRestoring, store.StateTerminating, store.StateTerminated, store.StateFailed,
	}
	var sbs []store.Sandbox
	for i, st := range states {
		sb := sandbox("a", sbID(i), t0.Add(time.Duration(i)*time.Second))
		sb.State = st
		sbs = append(sbs, sb)
	}
	other := sandbox("b", "sb-b", t0)
	other.State = store.StateReady
	insertSandboxes(t, s, append(sbs, other)...)

	inTx(t, s, func(tx store.Tx) error {
		for acct, want := range map[string]int{"a": len(store.PodStates), "b": 1, "none": 0} {
			n, err := tx.CountHoldingPods(ctx, acct)
			if err != nil {
				return err
			}
			if n != want {
				t.Errorf("CountHoldingPods(%s): got %d, want %d", acct, n, want)
			}
		}
		return nil
	})

	got, err := s.SandboxesInStates(ctx, store.StateReady, store.StateSuspended)
	if err != nil {
		t.Fatalf("SandboxesInStates: %v", err)
	}
	gotIDs := ids(got)
	slices.Sort(gotIDs)
	wantEqual(t, "SandboxesInStates(ready, suspended)", gotIDs, []string{"sb-01", "sb-03", "sb-b"})
	got, err = s.SandboxesInStates(ctx)
	if err != nil {
		t.Fatalf("SandboxesInStates(): %v", err)
	}
	wantEqual(t, "SandboxesInStates()", len(got), 0)
}

func testExpiredSandboxes(t *testing.T, ctx context.Context, s store.Store) {
	now := t0.Add(time.Hour)
	const maxLifetime = 30 * time.Minute
	young := now.Add(-10 * time.Minute) // created within the lifetime cap
	cases := []struct {
		id       string
		state    store.State
		created  time.Time
		deadline time.Time
	}{
		{"late-ready", store.StateReady, t0, now.Add(-time.Minute)},
		{"later-pending", store.StatePending, t0, now.Add(-2 * time.Minute)},
		{"late-suspended", store.StateSuspended, t0, now.Add(-time.Second)},
		{"at-deadline", store.StateReady, t0, now},
		{"in-time", store.StateReady, t0, now.Add(time.Minute)},
		{"late-terminating", store.StateTerminating, t0, now.Add(-time.Hour)},
		{"late-restoring", store.StateRestoring, t0, now.Add(-time.Hour)},
		{"late-terminated", store.StateTerminated, t0, now.Add(-time.Hour)},
		// Suspended within the cap: the deadline clock is paused, so these
		// are not due however old their deadline, and being the most
		// overdue they must not take the places of due sandboxes.
		{"paused-1", store.StateSuspended, young, now.Add(-3 * time.Hour)},
		{"paused-2", store.StateSuspended, young, now.Add(-3 * time.Hour)},
		{"paused-3", store.StateSuspended, young, now.Add(-3 * time.Hour)},
	}
	for _, c := range cases {
		sb := sandbox("a", c.id, c.created)
		sb.State, sb.DeadlineAt = c.state, c.deadline
		insertSandboxes(t, s, sb)
	}
	got, err := s.ExpiredSandboxes(ctx, now, maxLifetime, 0)
	if err != nil {
		t.Fatalf("ExpiredSandboxes: %v", err)
	}
	// Most overdue first, so a limited sweep takes the oldest debts.
	wantEqual(t, "expired", ids(got), []string{"later-pending", "late-ready", "late-suspended"})
	got, err = s.ExpiredSandboxes(ctx, now, maxLifetime, 2)
	if err != nil {
		t.Fatalf("ExpiredSandboxes: %v", err)
	}
	wantEqual(t, "expired, limit 2", ids(got), []string{"later-pending", "late-ready"})
}

func testIdle(t *testing.T, ctx context.Context, s store.Store) {
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
