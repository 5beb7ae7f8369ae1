package lifecycle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// TestMintSSHCredentialWhileSuspending: a credential can be minted in
// every live state, suspending included (it used to be 409), and a
// connection with it waits for the suspend to finish and wakes the
// sandbox; an ended sandbox refuses.
func TestMintSSHCredentialWhileSuspending(t *testing.T) {
	t.Parallel()
	h := newIdleHarness(t, "sqlite", nil)
	ctx := context.Background()
	sb := h.readySandbox(t)
	release := gate(t, &h.prov.suspendGate)
	if err := h.m.Suspend(ctx, sb.ID, "test"); err != nil {
		t.Fatal(err)
	}
	h.waitState(t, sb.ID, store.StateSuspending, stateCeiling)

	cred, err := h.m.MintSSHCredential(ctx, h.acct, "", sb.ID, 10)
	if err != nil {
		t.Fatalf("mint while suspending: %v", err)
	}
	if len(cred.PrivateKeyPEM) == 0 || cred.SandboxID != sb.ID || !cred.ExpiresAt.After(time.Now().Add(9*time.Minute)) {
		t.Fatalf("credential %+v", cred.SSHCredential)
	}
	stored, err := h.st.SSHCredential(ctx, cred.Fingerprint)
	if err != nil || stored.ID != cred.ID {
		t.Fatalf("stored credential %+v %v", stored, err)
	}

	// The connection's wake waits while the suspend is held, then wakes.
	woke := make(chan error, 1)
	go func() { woke <- h.wake(sb.ID, stateCeiling) }()
	select {
	case err := <-woke:
		t.Fatalf("wake returned while the sandbox was suspending: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	if err := <-woke; err != nil {
		t.Fatalf("wake after the suspend: %v", err)
	}
	if cur, _ := h.st.Sandbox(ctx, sb.ID); cur.State != store.StateReady || h.prov.restores.Load() != 1 {
		t.Fatalf("after the wake: %s, %d restores; want ready after one", cur.State, h.prov.restores.Load())
	}

	for _, minutes := range []int{0, lifecycle.MaxSSHCredentialMinutes + 1} {
		var fe *lifecycle.FieldError
		if _, err := h.m.MintSSHCredential(ctx, h.acct, "", sb.ID, minutes); !errors.As(err, &fe) || fe.Field != "ttl_minutes" {
			t.Errorf("mint for %d minutes: %v, want a ttl_minutes field error", minutes, err)
		}
	}
	if _, err := h.m.Delete(ctx, h.acct, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := h.m.MintSSHCredential(ctx, h.acct, "", sb.ID, 10); !errors.Is(err, lifecycle.ErrState) {
		t.Errorf("mint for an ended sandbox: %v, want ErrState", err)
	}
	other := store.Account{ID: "acct-2"}
	if _, err := h.m.MintSSHCredential(ctx, other, "", sb.ID, 10); !errors.Is(err, lifecycle.ErrNotFound) {
		t.Errorf("mint for another account's sandbox: %v, want ErrNotFound", err)
	}
}
