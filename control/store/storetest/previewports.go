package storetest

import (
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testPreviewPorts(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedAccounts(t, s, "a")
	insertSandboxes(t, s, sandbox("a", "sb-pp", t0), sandbox("a", "sb-pp2", t0))

	put := func(p store.PreviewPort) (store.PreviewPort, error) {
		var got store.PreviewPort
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			got, err = tx.PutPreviewPort(ctx, p)
			return err
		})
		return got, err
	}
	web := store.PreviewPort{
		SandboxID: "sb-pp", AccountID: "a", Port: 3000, Label: "k7q2xw9m4t8r1p6z",
		Access: store.AccessPrivate, HostPolicy: store.HostForward, CreatedAt: t0,
	}
	got, err := put(web)
	if err != nil {
		t.Fatalf("PutPreviewPort: %v", err)
	}
	wantEqual(t, "put preview port", got, web)
	api := web
	api.Port, api.Label, api.Access = 80, "a1b2c3d4e5f6g7h8", store.AccessPublic
	if _, err := put(api); err != nil {
		t.Fatalf("PutPreviewPort(80): %v", err)
	}

	// Exposing the same port again keeps the label (the URL stays valid)
	// and the creation time, and changes only access and host policy.
	again := web
	again.Label, again.Access, again.HostPolicy, again.CreatedAt = "ignored-new-label", store.AccessPublic, store.HostLocalhost, t0.Add(time.Hour)
	got, err = put(again)
	if err != nil {
		t.Fatalf("PutPreviewPort again: %v", err)
	}
	want := web
	want.Access, want.HostPolicy = store.AccessPublic, store.HostLocalhost
	wantEqual(t, "re-put preview port", got, want)

	wantRead(t, "preview ports, lowest first", []store.PreviewPort{api, want})(s.PreviewPorts(ctx, "sb-pp"))

	wantRead(t, "by label", want)(s.PreviewPortByLabel(ctx, web.Label))
	_, err = s.PreviewPortByLabel(ctx, "nosuchlabel")
	wantErr(t, "PreviewPortByLabel(unknown)", err, store.ErrNotFound)

	// A label is one host: another sandbox's port may not take it.
	clash := web
	clash.SandboxID = "sb-pp2"
	_, err = put(clash)
	wantErr(t, "label used by another port", err, store.ErrConflict)

	inTx(t, s, func(tx store.Tx) error { return tx.DeletePreviewPort(ctx, "sb-pp", 3000) })
	_, err = s.PreviewPortByLabel(ctx, web.Label)
	wantErr(t, "PreviewPortByLabel after delete", err, store.ErrNotFound)
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeletePreviewPort(ctx, "sb-pp", 3000) })
	wantErr(t, "DeletePreviewPort twice", err, store.ErrNotFound)
	list, err := s.PreviewPorts(ctx, "sb-pp2")
	if err != nil || len(list) != 0 {
		t.Errorf("PreviewPorts(other sandbox) = %v, %v; want none", list, err)
	}
}
