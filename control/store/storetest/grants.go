package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testGrantTokens(t *testing.T, ctx context.Context, s store.Store) {
	inTx(t, s, func(tx store.Tx) error {
		return tx.UpsertProject(ctx, store.Project{ID: "prj-1", AccountID: "a", Name: "web", CreatedAt: t0})
	})
	insertSandboxes(t, s, sandbox("a", "sb-g", t0))

	g0 := store.GrantToken{ID: "gr-0", SandboxID: "sb-g", AccountID: "a", ProjectID: "prj-1", Position: 0,
		Scopes: []string{"cache:read", "cache:write"}, CreatedAt: t0}
	g1 := store.GrantToken{ID: "gr-1", SandboxID: "sb-g", AccountID: "a", ProjectID: "prj-1", Position: 1,
		Scopes: []string{"registry:read"}, CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.InsertGrantToken(ctx, g1) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertGrantToken(ctx, g0) })
	})
	wantRead(t, "grants in request order, unminted", []store.GrantToken{g0, g1})(s.GrantTokens(ctx, "sb-g"))

	err := s.InTx(ctx, func(tx store.Tx) error { return tx.InsertGrantToken(ctx, g0) })
	wantErr(t, "second grant with the same id", err, store.ErrConflict)

	// An unminted grant has no hash and is found by none.
	_, err = s.GrantTokenByHash(ctx, nil)
	wantErr(t, "GrantTokenByHash(nil)", err, store.ErrNotFound)

	hash := []byte("0123456789abcdef0123456789abcdef")
	inTx(t, s, func(tx store.Tx) error { return tx.SetGrantTokenHash(ctx, g0.ID, hash, t0.Add(time.Second)) })
	tok, err := s.GrantTokenByHash(ctx, hash)
	if err != nil {
		t.Fatalf("GrantTokenByHash: %v", err)
	}
	minted := g0
	minted.Hash, minted.MintedAt = hash, ptr(t0.Add(time.Second))
	wantEqual(t, "minted grant", tok, minted)

	// Re-minting replaces the hash: the earlier token is dead.
	hash2 := []byte("fedcba9876543210fedcba9876543210")
	inTx(t, s, func(tx store.Tx) error { return tx.SetGrantTokenHash(ctx, g0.ID, hash2, t0.Add(2*time.Second)) })
	_, err = s.GrantTokenByHash(ctx, hash)
	wantErr(t, "GrantTokenByHash(replaced hash)", err, store.ErrNotFound)
	if _, err := s.GrantTokenByHash(ctx, hash2); err != nil {
		t.Errorf("GrantTokenByHash(new hash): %v", err)
	}
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.SetGrantTokenHash(ctx, "gr-missing", hash, t0) })
	wantErr(t, "SetGrantTokenHash(missing)", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.SetGrantTokenHash(ctx, g1.ID, hash2, t0) })
	wantErr(t, "two grants with one hash", err, store.ErrConflict)
}

func testAudit(t *testing.T, ctx context.Context, s store.Store) {
	in := []store.AuditEntry{
		{AccountID: "a", ProjectID: "p1", SandboxID: "sb-1", Caller: "tok-1", Action: "grant", Scopes: []string{"cache:read"}, Message: "m1", At: t0},
		{AccountID: "a", ProjectID: "p2", SandboxID: "sb-1", Caller: "tok-1", Action: "grant", Scopes: []string{"registry:write"}, Message: "m2", At: t0},
		{AccountID: "b", ProjectID: "p1", SandboxID: "sb-2", Caller: "tok-2", Action: "grant", Message: "m3", At: t0},
		{AccountID: "a", ProjectID: "p1", SandboxID: "sb-3", Caller: "tok-1", Action: "grant", Scopes: []string{"cache:write"}, Message: "m4", At: t0.Add(time.Second)},
	}
	inTx(t, s, func(tx store.Tx) error {
		for _, e := range in {
			if err := tx.InsertAudit(ctx, e); err != nil {
				return err
			}
		}
		return nil
	})
	msgs := func(es []store.AuditEntry) []string {
		out := []string{}
		for _, e := range es {
			out = append(out, e.Message)
		}
		return out
	}
	for _, c := range []struct {
		name string
		f    store.AuditFilter
		want []string
	}{
		{"account", store.AuditFilter{AccountID: "a"}, []string{"m4", "m2", "m1"}},
		{"project", store.AuditFilter{AccountID: "a", ProjectID: "p1"}, []string{"m4", "m1"}},
		{"sandbox", store.AuditFilter{AccountID: "a", SandboxID: "sb-1"}, []string{"m2", "m1"}},
		{"other account's project", store.AuditFilter{AccountID: "b", ProjectID: "p2"}, []string{}},
		{"limit", store.AuditFilter{AccountID: "a", Limit: 1}, []string{"m4"}},
	} {
		got, err := s.Audit(ctx, c.f)
		if err != nil {
			t.Fatalf("%s: Audit(%+v): %v", c.name, c.f, err)
		}
		wantEqual(t, c.name, msgs(got), c.want)
	}
	all, _ := s.Audit(ctx, store.AuditFilter{AccountID: "a"})
	if len(all) != 3 {
		t.Fatalf("Audit(a): %d entries, want 3", len(all))
	}
	want := in[3]
	want.ID = all[0].ID
	wantEqual(t, "audit entry round trip", all[0], want)
	page, _ := s.Audit(ctx, store.AuditFilter{AccountID: "a", Before: all[0].ID})
	wantEqual(t, "page after the newest", msgs(page), []string{"m2", "m1"})
}

func testConsumer(t *testing.T, ctx context.Context, s store.Store) {
	sb := sandbox("a", "sb-c", t0)
	sb.Consumer = store.Consumer{Actor: "agent", Project: "tuist/tuist", SessionID: "sess-1", RunID: "run-9"}
	insertSandboxes(t, s, sb, sandbox("a", "sb-plain", t0))
	got, err := s.Sandbox(ctx, sb.ID)
	if err != nil {
		t.Fatalf("Sandbox: %v", err)
	}
	wantEqual(t, "consumer", got.Consumer, sb.Consumer)

	// Every event of the sandbox carries its consumer, whoever writes it.
	inTx(t, s, func(tx store.Tx) error {
		return tx.InsertEvent(ctx, store.Event{SandboxID: sb.ID, AccountID: "a", Type: "state", State: store.StateReady, Actor: "provisioner", At: t0})
	})
	inTx(t, s, func(tx store.Tx) error {
		return tx.InsertEvent(ctx, store.Event{SandboxID: "sb-plain", AccountID: "a", Type: "state", State: store.StateReady, At: t0})
	})
	evs, err := s.Events(ctx, sb.ID, 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("Events: %v, %d events", err, len(evs))
	}
	wantEqual(t, "event consumer", evs[0].Consumer, sb.Consumer)
	plain, _ := s.Events(ctx, "sb-plain", 0)
	wantEqual(t, "event consumer of a sandbox without one", plain[0].Consumer, store.Consumer{})
}

func testAccountsAndLiveCounts(t *testing.T, ctx context.Context, s store.Store) {
	as, err := s.Accounts(ctx)
	if err != nil {
		t.Fatalf("Accounts: %v", err)
	}
	wantEqual(t, "accounts", []string{as[0].ID, as[1].ID}, []string{"a", "b"})

	mk := func(acct, id, platform string, st store.State) store.Sandbox {
		sb := sandbox(acct, id, t0)
		sb.Platform, sb.State = platform, st
		return sb
	}
	insertSandboxes(t, s,
		mk("a", "s1", "linux", store.StateReady), mk("a", "s2", "linux", store.StateReady),
		mk("a", "s3", "macos", store.StatePending), mk("a", "s4", "linux", store.StateTerminated),
		mk("b", "s5", "linux", store.StateSuspended), mk("b", "s6", "linux", store.StateFailed))
	got, err := s.LiveCounts(ctx)
	if err != nil {
		t.Fatalf("LiveCounts: %v", err)
	}
	wantEqual(t, "live counts", got, []store.LiveCount{
		{AccountID: "a", Platform: "linux", State: store.StateReady, Count: 2},
		{AccountID: "a", Platform: "macos", State: store.StatePending, Count: 1},
		{AccountID: "b", Platform: "linux", State: store.StateSuspended, Count: 1},
	})
}

// testSubscribeEvents checks the signal comes after commit, only for the
// sandbox written, and not for a rolled-back transaction.
func testSubscribeEvents(t *testing.T, ctx context.Context, s store.Store) {
	ch, cancel := s.SubscribeEvents("sb-n")
	defer cancel()
	other, cancelOther := s.SubscribeEvents("sb-other")
	defer cancelOther()

	ev := store.Event{SandboxID: "sb-n", AccountID: "a", Type: "state", State: store.StatePending, At: t0}
	err := s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertEvent(ctx, ev); err != nil {
			return err
		}
		return errRollback
	})
	wantErr(t, "rolled back insert", err, errRollback)

	// The Postgres listener connects lazily and then signals everyone
	// once; drain until quiet so only later signals count.
	drain := func(c <-chan struct{}) {
		for {
			select {
			case <-c:
			case <-time.After(300 * time.Millisecond):
				return
			}
		}
	}
	drain(ch)
	drain(other)

	inTx(t, s, func(tx store.Tx) error { return tx.InsertEvent(ctx, ev) })
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("no signal after a committed event")
	}
	evs, err := s.Events(ctx, "sb-n", 0)
	if err != nil || len(evs) != 1 {
		t.Fatalf("after the signal Events = %d events, %v; want the committed one", len(evs), err)
	}
	select {
	case <-other:
		t.Fatal("a subscriber of another sandbox was signalled")
	case <-time.After(300 * time.Millisecond):
	}
}

func testRevokeToken(t *testing.T, ctx context.Context, s store.Store) {
	hash := []byte("revoke-me-0123456789abcdef012345")
	inTx(t, s, func(tx store.Tx) error {
		return tx.InsertToken(ctx, store.Token{ID: "tok-r", AccountID: "a", Kind: store.TokenAgent, Hash: hash, CreatedAt: t0})
	})
	if _, _, err := s.AccountByTokenHash(ctx, hash, t0); err != nil {
		t.Fatalf("before revoke: %v", err)
	}
	inTx(t, s, func(tx store.Tx) error { return tx.RevokeToken(ctx, "tok-r", t0.Add(time.Minute)) })
	inTx(t, s, func(tx store.Tx) error { return tx.RevokeToken(ctx, "tok-r", t0.Add(time.Hour)) })
	_, _, err := s.AccountByTokenHash(ctx, hash, t0.Add(2*time.Hour))
	wantErr(t, "revoked token", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.RevokeToken(ctx, "tok-missing", t0) })
	wantErr(t, "RevokeToken(missing)", err, store.ErrNotFound)

	// The revocation is listed after any earlier instant, with the first
	// revocation's time, and not after it.
	for _, tc := range []struct {
		since time.Time
		want  int
	}{{t0, 1}, {t0.Add(time.Minute - time.Microsecond), 1}, {t0.Add(time.Minute), 0}} {
		got, err := s.TokensRevokedSince(ctx, tc.since)
		if err != nil || len(got) != tc.want {
			t.Fatalf("TokensRevokedSince(%v) = %+v, %v; want %d", tc.since, got, err, tc.want)
		}
		if tc.want == 1 && (got[0].ID != "tok-r" || got[0].AccountID != "a" || got[0].RevokedAt == nil || !got[0].RevokedAt.Equal(t0.Add(time.Minute))) {
			t.Errorf("TokensRevokedSince(%v) = %+v, want tok-r of a, revoked at %v", tc.since, got[0], t0.Add(time.Minute))
		}
	}
}
