package storetest

// The rows a sandbox owns beside its own: the SSH credentials minted for
// it, the ports it exposes and the services it declares. Each belongs to
// one sandbox and is found by it.

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testSSHCredentials(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-ssh", t0))

	want := store.SSHCredential{
		ID: "sshc-1", SandboxID: "sb-ssh", AccountID: "a",
		Fingerprint: "SHA256:2m3J0ZfB9QbC0e6p2Jm7y8QbH1cA7wE1rZ8vT6yP0aQ",
		CreatedAt:   t0, ExpiresAt: t0.Add(time.Hour),
	}
	inTx(t, s, func(tx store.Tx) error { return tx.InsertSSHCredential(ctx, want) })
	wantRead(t, "ssh credential", want)(s.SSHCredential(ctx, want.Fingerprint))

	// Expired credentials are still returned, so the authorizer can tell
	// the user that theirs expired rather than that it is unknown.
	old := want
	old.ID, old.Fingerprint, old.ExpiresAt = "sshc-old", "SHA256:expired", t0.Add(-time.Minute)
	inTx(t, s, func(tx store.Tx) error { return tx.InsertSSHCredential(ctx, old) })
	wantRead(t, "expired ssh credential", old)(s.SSHCredential(ctx, old.Fingerprint))

	// A credential carries its minting token's revocation.
	minted := want
	minted.ID, minted.Fingerprint, minted.TokenID = "sshc-tok", "SHA256:minted", "tok-ssh"
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.InsertToken(ctx, store.Token{ID: "tok-ssh", AccountID: "a", Kind: store.TokenAgent,
			Name: "ssh", Hash: []byte("ssh-token-hash"), CreatedAt: t0}); err != nil {
			return err
		}
		return tx.InsertSSHCredential(ctx, minted)
	})
	wantRead(t, "ssh credential of a live token", minted)(s.SSHCredential(ctx, minted.Fingerprint))
	inTx(t, s, func(tx store.Tx) error { return tx.RevokeToken(ctx, "tok-ssh", t0.Add(time.Minute)) })
	revoked := minted
	revoked.TokenRevoked = true
	wantRead(t, "ssh credential of a revoked token", revoked)(s.SSHCredential(ctx, minted.Fingerprint))

	_, err := s.SSHCredential(ctx, "SHA256:unknown")
	wantErr(t, "SSHCredential(unknown)", err, store.ErrNotFound)

	dupFP := want
	dupFP.ID = "sshc-2"
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertSSHCredential(ctx, dupFP) })
	wantErr(t, "second credential with the same fingerprint", err, store.ErrConflict)

	dupID := want
	dupID.Fingerprint = "SHA256:other"
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.InsertSSHCredential(ctx, dupID) })
	wantErr(t, "second credential with the same id", err, store.ErrConflict)

	// Visible inside the transaction that wrote it, gone after rollback.
	rolled := want
	rolled.ID, rolled.Fingerprint = "sshc-rb", "SHA256:rolledback"
	err = s.InTx(ctx, func(tx store.Tx) error {
		if err := tx.InsertSSHCredential(ctx, rolled); err != nil {
			return err
		}
		if _, err := tx.SSHCredential(ctx, rolled.Fingerprint); err != nil {
			t.Errorf("SSHCredential inside the writing tx: %v", err)
		}
		return errRollback
	})
	wantErr(t, "rolled back tx", err, errRollback)
	_, err = s.SSHCredential(ctx, rolled.Fingerprint)
	wantErr(t, "SSHCredential after rollback", err, store.ErrNotFound)
}

func testPreviewPorts(t *testing.T, ctx context.Context, s store.Store) {
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

func testServices(t *testing.T, ctx context.Context, s store.Store) {
	insertSandboxes(t, s, sandbox("a", "sb-sv", t0), sandbox("a", "sb-sv2", t0))
	put := func(sv store.Service) store.Service {
		t.Helper()
		var got store.Service
		if err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			got, err = tx.PutService(ctx, sv)
			return err
		}); err != nil {
			t.Fatalf("PutService(%+v): %v", sv, err)
		}
		return got
	}
	web := store.Service{
		SandboxID: "sb-sv", Name: "web", Command: "npm", Args: []string{"run", "dev"}, Cwd: "app",
		Env: map[string]string{"NODE_ENV": "development"}, Port: 5173, CreatedAt: t0, UpdatedAt: t0,
	}
	if got := put(web); !reflect.DeepEqual(got, web) {
		t.Fatalf("PutService returned %+v, want %+v", got, web)
	}
	db := put(store.Service{SandboxID: "sb-sv", Name: "db", Command: "redis-server --port 6400", CreatedAt: t0, UpdatedAt: t0})
	if len(db.Args) != 0 || len(db.Env) != 0 || db.Port != 0 {
		t.Errorf("service without args, env or port read back as %+v", db)
	}
	put(store.Service{SandboxID: "sb-sv2", Name: "web", Command: "other", CreatedAt: t0, UpdatedAt: t0})

	// Declaring again replaces everything but the creation time.
	later := t0.Add(24 * time.Hour)
	web2 := store.Service{SandboxID: "sb-sv", Name: "web", Command: "python3", Args: []string{"-m", "http.server"}, Port: 8000, CreatedAt: later, UpdatedAt: later}
	got := put(web2)
	if !got.CreatedAt.Equal(t0) || !got.UpdatedAt.Equal(later) || got.Command != "python3" || got.Port != 8000 || got.Cwd != "" || len(got.Env) != 0 {
		t.Errorf("re-declared service = %+v; want the new declaration with CreatedAt %s", got, t0)
	}
	list, err := s.Services(ctx, "sb-sv")
	if err != nil || len(list) != 2 || list[0].Name != "db" || list[1].Name != "web" {
		t.Fatalf("Services = %+v, %v; want db and web, by name", list, err)
	}
	if err := s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteService(ctx, "sb-sv", "db") }); err != nil {
		t.Fatal(err)
	}
	err = s.InTx(ctx, func(tx store.Tx) error { return tx.DeleteService(ctx, "sb-sv", "db") })
	if !errors.Is(err, store.ErrNotFound) {
		t.Errorf("deleting a deleted service: %v, want ErrNotFound", err)
	}
	if list, _ := s.Services(ctx, "sb-sv"); len(list) != 1 || list[0].Name != "web" {
		t.Errorf("after delete: %+v", list)
	}
}
