package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testAccounts(t *testing.T, ctx context.Context, s store.Store) {
	want := store.Account{
		ID: "acct-1", Name: "first", SandboxesEnabled: true, ConcurrentLimit: 3,
		AllowedPlatforms: []string{"linux", "macos"}, MonthlyMinutes: 600, CreatedAt: t0,
	}
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertAccount(ctx, want) })
	wantRead(t, "account after insert", want)(s.Account(ctx, want.ID))

	// An upsert changes every field except the creation time.
	upd := want
	upd.Name, upd.SandboxesEnabled, upd.ConcurrentLimit = "renamed", false, 0
	upd.AllowedPlatforms, upd.MonthlyMinutes, upd.CreatedAt = nil, 0, t0.Add(time.Hour)
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertAccount(ctx, upd) })
	got, err := s.Account(ctx, want.ID)
	if err != nil {
		t.Fatalf("Account(%q): %v", want.ID, err)
	}
	upd.CreatedAt = t0
	wantEqual(t, "account after upsert", got, upd)

	_, err = s.Account(ctx, "missing")
	wantErr(t, "Account(missing)", err, store.ErrNotFound)

	err = s.InTx(ctx, func(tx store.Tx) error {
		return tx.UpsertAccount(ctx, store.Account{ID: "acct-2", Name: "renamed", CreatedAt: t0})
	})
	wantErr(t, "second account with a taken name", err, store.ErrConflict)
}

func testProjects(t *testing.T, ctx context.Context, s store.Store) {
	want := store.Project{ID: "prj-1", AccountID: "a", Name: "web", CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertProject(ctx, want) })
	wantRead(t, "project", want)(s.Project(ctx, want.ID))

	renamed := want
	renamed.Name = "api"
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertProject(ctx, renamed) })
	wantRead(t, "renamed project", renamed)(s.Project(ctx, want.ID))

	_, err := s.Project(ctx, "missing")
	wantErr(t, "Project(missing)", err, store.ErrNotFound)

	err = s.InTx(ctx, func(tx store.Tx) error {
		return tx.UpsertProject(ctx, store.Project{ID: "prj-1", AccountID: "b", Name: "steal"})
	})
	wantErr(t, "project moved to another account", err, store.ErrConflict)
}

func testTokens(t *testing.T, ctx context.Context, s store.Store) {
	now := t0.Add(24 * time.Hour)
	tokens := []store.Token{
		{ID: "live", Kind: store.TokenAgent, Name: "ci", CreatedAt: t0},
		{ID: "future-expiry", Kind: store.TokenProject, CreatedAt: t0, ExpiresAt: ptr(now.Add(time.Second))},
		{ID: "expired", Kind: store.TokenAgent, CreatedAt: t0, ExpiresAt: ptr(now)},
		{ID: "revoked", Kind: store.TokenAgent, CreatedAt: t0, RevokedAt: ptr(t0.Add(time.Minute))},
	}
	inTx(t, s, func(tx store.Tx) error {
		for i := range tokens {
			tokens[i].AccountID = "a"
			tokens[i].Hash = bytes.Repeat([]byte{byte(i + 1)}, 32)
			if err := tx.InsertToken(ctx, tokens[i]); err != nil {
				return err
			}
		}
		return nil
	})

	tests := []struct {
		name    string
		hash    []byte
		want    *store.Token
		wantErr error
	}{
		{"live", tokens[0].Hash, &tokens[0], nil},
		{"not yet expired", tokens[1].Hash, &tokens[1], nil},
		{"expired at now", tokens[2].Hash, nil, store.ErrNotFound},
		{"revoked", tokens[3].Hash, nil, store.ErrNotFound},
		{"unknown", bytes.Repeat([]byte{0xff}, 32), nil, store.ErrNotFound},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, tok, err := s.AccountByTokenHash(ctx, tc.hash, now)
			if tc.wantErr != nil {
				wantErr(t, "AccountByTokenHash", err, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("AccountByTokenHash: %v", err)
			}
			wantEqual(t, "token", tok, *tc.want)
			if a.ID != "a" {
				t.Errorf("account: got %q, want %q", a.ID, "a")
			}
		})
	}

	err := s.InTx(ctx, func(tx store.Tx) error {
		return tx.InsertToken(ctx, store.Token{ID: "dup", AccountID: "a", Kind: store.TokenAgent, Hash: tokens[0].Hash})
	})
	wantErr(t, "token with a duplicate hash", err, store.ErrConflict)
}

func testProfiles(t *testing.T, ctx context.Context, s store.Store) {
	small := store.Profile{Name: "small", Platform: "linux", CPU: 0.5, MemoryMB: 1024, DiskGB: 10, Image: "img:1"}
	mac := store.Profile{Name: "mac", Platform: "macos", CPU: 4, MemoryMB: 8192, DiskGB: 80}
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.UpsertProfile(ctx, small) },
			func(ctx context.Context, tx store.Tx) error { return tx.UpsertProfile(ctx, mac) })
	})
	small.CPU, small.Image = 1.5, "img:2"
	inTx(t, s, func(tx store.Tx) error { return tx.UpsertProfile(ctx, small) })

	wantRead(t, "updated profile", small)(s.Profile(ctx, "small"))
	wantRead(t, "profiles by name", []store.Profile{mac, small})(s.Profiles(ctx))
	_, err := s.Profile(ctx, "missing")
	wantErr(t, "Profile(missing)", err, store.ErrNotFound)
}
