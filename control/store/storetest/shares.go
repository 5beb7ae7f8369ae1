package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testPortNames(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-pn", t0), sandbox("a", "sb-pn2", t0))
	put := func(p store.PreviewPort) (store.PreviewPort, error) {
		var got store.PreviewPort
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			got, err = tx.PutPreviewPort(ctx, p)
			return err
		})
		return got, err
	}
	web := store.PreviewPort{SandboxID: "sb-pn", AccountID: "a", Port: 3000, Label: "pnlabel3000aaaaaaaaa", Name: "web",
		Access: store.AccessPrivate, HostPolicy: store.HostForward, CreatedAt: t0}
	got, err := put(web)
	if err != nil {
		t.Fatalf("PutPreviewPort(web): %v", err)
	}
	wantEqual(t, "named port", got, web)

	// Two ports of one sandbox may not share a name; another sandbox may
	// use it, and any number of ports may have none.
	clash := web
	clash.Port, clash.Label = 3001, "pnlabel3001aaaaaaaaa"
	_, err = put(clash)
	wantErr(t, "name used by another port of the sandbox", err, store.ErrConflict)
	other := clash
	other.SandboxID = "sb-pn2"
	if _, err := put(other); err != nil {
		t.Errorf("same name on another sandbox: %v", err)
	}
	for i, port := range []int{4000, 4001} {
		unnamed := web
		unnamed.Port, unnamed.Name, unnamed.Label = port, "", "pnunnamed"+string(rune('a'+i))
		if _, err := put(unnamed); err != nil {
			t.Errorf("unnamed port %d: %v", port, err)
		}
	}

	// Exposing again renames.
	renamed := web
	renamed.Name = "storybook"
	got, err = put(renamed)
	if err != nil {
		t.Fatalf("rename: %v", err)
	}
	wantEqual(t, "renamed port", got.Name, "storybook")
	wantRead(t, "by label after rename", renamed)(s.PreviewPortByLabel(ctx, web.Label))
}

func testShares(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-sh", t0), sandbox("a", "sb-sh2", t0))
	older := store.Share{ID: "shr-1", SandboxID: "sb-sh", AccountID: "a", Port: 3000, Hash: []byte("hash-one-32-bytes-long-aaaaaaaaa"),
		Note: "for design review", CreatedBy: "tok-1", CreatedAt: t0, ExpiresAt: t0.Add(2 * time.Hour)}
	newer := older
	newer.ID, newer.Hash, newer.Note, newer.CreatedAt = "shr-2", []byte("hash-two-32-bytes-long-aaaaaaaaa"), "", t0.Add(time.Minute)
	inTx(t, s, func(tx store.Tx) error {
		return all(ctx, tx,
			func(ctx context.Context, tx store.Tx) error { return tx.InsertShare(ctx, older) },
			func(ctx context.Context, tx store.Tx) error { return tx.InsertShare(ctx, newer) })
	})
	wantRead(t, "shares, newest first", []store.Share{newer, older})(s.Shares(ctx, "sb-sh"))
	wantRead(t, "share by id", older)(s.ShareByID(ctx, "shr-1"))
	wantRead(t, "share by hash", newer)(s.ShareByHash(ctx, newer.Hash))
	_, err := s.ShareByHash(ctx, []byte("no such hash"))
	wantErr(t, "ShareByHash(unknown)", err, store.ErrNotFound)
	_, err = s.ShareByID(ctx, "shr-none")
	wantErr(t, "ShareByID(unknown)", err, store.ErrNotFound)
	list, err := s.Shares(ctx, "sb-sh2")
	if err != nil || len(list) != 0 {
		t.Errorf("Shares(other sandbox) = %v, %v; want none", list, err)
	}

	dup := older
	dup.ID = "shr-3"
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertShare(ctx, dup) })
	wantErr(t, "duplicate hash", err, store.ErrConflict)

	// The first use is recorded once.
	var first bool
	inTx(t, s, func(tx store.Tx) (err error) {
		first, err = tx.MarkShareUsed(ctx, "shr-1", t0.Add(time.Second))
		return err
	})
	if !first {
		t.Errorf("first MarkShareUsed: got first=false, want true")
	}
	inTx(t, s, func(tx store.Tx) (err error) {
		first, err = tx.MarkShareUsed(ctx, "shr-1", t0.Add(time.Hour))
		return err
	})
	if first {
		t.Errorf("second MarkShareUsed: got first=true, want false")
	}

	// Revocation is idempotent and keeps its first time.
	inTx(t, s, func(tx store.Tx) error { return tx.RevokeShare(ctx, "shr-1", t0.Add(time.Minute)) })
	inTx(t, s, func(tx store.Tx) error { return tx.RevokeShare(ctx, "shr-1", t0.Add(time.Hour)) })
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.RevokeShare(ctx, "shr-none", t0) })
	wantErr(t, "RevokeShare(unknown)", err, store.ErrNotFound)
	want := older
	want.FirstUsedAt, want.RevokedAt = ptr(t0.Add(time.Second)), ptr(t0.Add(time.Minute))
	got, err := s.ShareByID(ctx, "shr-1")
	wantRead(t, "used and revoked share", want)(got, err)
	if got.Live(t0.Add(2 * time.Minute)) {
		t.Errorf("revoked share reads live")
	}
	if n := newer; !n.Live(t0) || n.Live(n.ExpiresAt) {
		t.Errorf("Live: want live before ExpiresAt and not at it")
	}
}
