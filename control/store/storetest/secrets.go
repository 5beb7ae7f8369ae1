package storetest

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// testSecrets: a secret is stored per account by name, replaced in place
// (CreatedAt kept), listed by name without crossing accounts, and
// deleted once.
func testSecrets(t *testing.T, ctx context.Context, s store.Store) {
	put := func(sec store.Secret) {
		t.Helper()
		inTx(t, s, func(tx store.Tx) error { return tx.PutSecret(ctx, sec) })
	}
	put(store.Secret{AccountID: "a", Name: "NPM_TOKEN", Sealed: []byte{1, 2, 3}, CreatedAt: t0, UpdatedAt: t0})
	put(store.Secret{AccountID: "a", Name: "API_KEY", Sealed: []byte{9}, CreatedAt: t0, UpdatedAt: t0})
	put(store.Secret{AccountID: "b", Name: "NPM_TOKEN", Sealed: []byte{7}, CreatedAt: t0, UpdatedAt: t0})
	later := t0.Add(time.Hour)
	put(store.Secret{AccountID: "a", Name: "NPM_TOKEN", Sealed: []byte{4, 5}, CreatedAt: later, UpdatedAt: later})

	got, err := s.Secret(ctx, "a", "NPM_TOKEN")
	if err != nil || !bytes.Equal(got.Sealed, []byte{4, 5}) || !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) {
		t.Errorf("replaced secret = %+v, %v; want sealed [4 5], created %v, updated %v", got, err, t0, later)
	}
	list, err := s.Secrets(ctx, "a")
	if err != nil || len(list) != 2 || list[0].Name != "API_KEY" || list[1].Name != "NPM_TOKEN" {
		t.Errorf("Secrets(a) = %+v, %v; want API_KEY, NPM_TOKEN", list, err)
	}
	if b, err := s.Secret(ctx, "b", "NPM_TOKEN"); err != nil || !bytes.Equal(b.Sealed, []byte{7}) {
		t.Errorf("b's secret = %+v, %v; want its own", b, err)
	}
	_, err = s.Secret(ctx, "b", "API_KEY")
	wantErr(t, "Secret(b, API_KEY)", err, store.ErrNotFound)

	inTx(t, s, func(tx store.Tx) error { return tx.DeleteSecret(ctx, "a", "NPM_TOKEN") })
	_, err = s.Secret(ctx, "a", "NPM_TOKEN")
	wantErr(t, "deleted secret", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteSecret(ctx, "a", "NPM_TOKEN") })
	wantErr(t, "delete again", err, store.ErrNotFound)
	if b, err := s.Secret(ctx, "b", "NPM_TOKEN"); err != nil || b.Name != "NPM_TOKEN" {
		t.Errorf("b's secret after a's delete: %+v, %v", b, err)
	}
}
