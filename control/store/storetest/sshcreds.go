package storetest

import (
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

func testSSHCredentials(t *testing.T, s store.Store) {
	ctx := t.Context()
	seedAccounts(t, s, "a")
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
