package sshauth_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/sbxedge/sbx/control/sshauth"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// fakeStore holds credentials by fingerprint and sandboxes by ID.
type fakeStore struct {
	creds map[string]store.SSHCredential
	sbs   map[string]store.Sandbox
	err   error
}

func (f *fakeStore) SSHCredential(_ context.Context, fp string) (store.SSHCredential, error) {
	if f.err != nil {
		return store.SSHCredential{}, f.err
	}
	c, ok := f.creds[fp]
	if !ok {
		return c, store.ErrNotFound
	}
	return c, nil
}

func (f *fakeStore) Sandbox(_ context.Context, id string) (store.Sandbox, error) {
	sb, ok := f.sbs[id]
	if !ok {
		return sb, store.ErrNotFound
	}
	return sb, nil
}

// SandboxByName finds a sandbox that has not ended by account and name,
// as the store does.
func (f *fakeStore) SandboxByName(_ context.Context, acct, name string) (store.Sandbox, error) {
	if f.err != nil {
		return store.Sandbox{}, f.err
	}
	for _, sb := range f.sbs {
		if sb.AccountID == acct && sb.Name == name && sb.State != store.StateTerminated && sb.State != store.StateFailed && sb.State != store.StateTerminating {
			return sb, nil
		}
	}
	return store.Sandbox{}, store.ErrNotFound
}

func TestAuthorize(t *testing.T) {
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sb := func(id string, st store.State) store.Sandbox {
		return store.Sandbox{ID: id, AccountID: "acct", State: st, Endpoint: "127.0.0.1:4000", SSHUser: "dev", HostKey: "ssh-ed25519 AAAA"}
	}
	cred := func(fp, sbID string, exp time.Time) store.SSHCredential {
		return store.SSHCredential{ID: "c-" + fp, SandboxID: sbID, AccountID: "acct", Fingerprint: fp, ExpiresAt: exp}
	}
	fs := &fakeStore{
		creds: map[string]store.SSHCredential{
			"fp-a":       cred("fp-a", "sb-a", now.Add(time.Hour)),
			"fp-b":       cred("fp-b", "sb-b", now.Add(time.Hour)),
			"fp-old":     cred("fp-old", "sb-a", now),
			"fp-ended":   cred("fp-ended", "sb-ended", now.Add(time.Hour)),
			"fp-pending": cred("fp-pending", "sb-pending", now.Add(time.Hour)),
			"fp-gone":    cred("fp-gone", "sb-gone", now.Add(time.Hour)),
			"fp-stolen":  {ID: "c-x", SandboxID: "sb-a", AccountID: "acct-other", Fingerprint: "fp-stolen", ExpiresAt: now.Add(time.Hour)},
			"fp-revoked": {ID: "c-r", SandboxID: "sb-a", AccountID: "acct", Fingerprint: "fp-revoked", TokenID: "tok-1", TokenRevoked: true, ExpiresAt: now.Add(time.Hour)},
		},
		sbs: map[string]store.Sandbox{
			"sb-a":       sb("sb-a", store.StateReady),
			"sb-b":       sb("sb-b", store.StateReady),
			"sb-ended":   sb("sb-ended", store.StateTerminated),
			"sb-pending": sb("sb-pending", store.StatePending),
		},
	}
	// Names: unique among an account's live sandboxes. "other" belongs to
	// another account, "gone" to an ended sandbox.
	named := func(id, name, acct string, st store.State) {
		s := sb(id, st)
		s.Name, s.AccountID = name, acct
		fs.sbs[id] = s
	}
	named("sb-a", "alpha", "acct", store.StateReady)
	named("sb-b", "beta", "acct", store.StateReady)
	named("sb-pending", "pend", "acct", store.StatePending)
	named("sb-ended", "gone", "acct", store.StateTerminated)
	named("sb-o", "other", "acct-other", store.StateReady)
	a := sshauth.New(fs, func() time.Time { return now }, nil)
	tests := []struct {
		name, user, fp string
		want           error
	}{
		{"live", "sb-a", "fp-a", nil},
		{"unknown key", "sb-a", "fp-nope", edgeapi.ErrSSHUnknownKey},
		{"key of A used for B", "sb-b", "fp-a", edgeapi.ErrSSHWrongSandbox},
		{"expired at the instant", "sb-a", "fp-old", edgeapi.ErrSSHExpired},
		{"expired key for another sandbox reveals nothing", "sb-b", "fp-old", edgeapi.ErrSSHWrongSandbox},
		{"ended sandbox", "sb-ended", "fp-ended", edgeapi.ErrSSHSandboxEnded},
		{"pending sandbox", "sb-pending", "fp-pending", edgeapi.ErrSSHNotReady},
		{"sandbox row gone", "sb-gone", "fp-gone", edgeapi.ErrSSHUnknownSandbox},
		{"account mismatch", "sb-a", "fp-stolen", edgeapi.ErrSSHUnknownKey},
		{"minting token revoked", "sb-a", "fp-revoked", edgeapi.ErrSSHUnknownKey},
		{"minting token revoked, other sandbox reveals nothing", "sb-b", "fp-revoked", edgeapi.ErrSSHUnknownKey},
		{"live by name", "alpha", "fp-a", nil},
		{"unknown key by name", "alpha", "fp-nope", edgeapi.ErrSSHUnknownKey},
		{"name of another of the account's sandboxes", "beta", "fp-a", edgeapi.ErrSSHWrongSandbox},
		{"unknown name", "nope", "fp-a", edgeapi.ErrSSHWrongSandbox},
		{"another account's name, refused as an unknown name", "other", "fp-a", edgeapi.ErrSSHWrongSandbox},
		{"ended sandbox's name is no longer its", "gone", "fp-ended", edgeapi.ErrSSHWrongSandbox},
		{"pending by name", "pend", "fp-pending", edgeapi.ErrSSHNotReady},
		{"expired by name", "alpha", "fp-old", edgeapi.ErrSSHExpired},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := a.Authorize(t.Context(), tc.user, tc.fp)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Authorize(%s, %s): %v", tc.user, tc.fp, err)
				}
				want := sshauth.Route{SandboxID: "sb-a", Addr: "127.0.0.1:4000", User: "dev", HostKey: "ssh-ed25519 AAAA", ExpiresAt: now.Add(time.Hour)}
				if r != want {
					t.Errorf("route %+v, want %+v", r, want)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("Authorize(%s, %s): got %v, want %v", tc.user, tc.fp, err, tc.want)
			}
		})
	}

	t.Run("not ready by name names the ID to wake", func(t *testing.T) {
		_, err := a.Authorize(t.Context(), "pend", "fp-pending")
		var nr *edgeapi.SSHNotReadyError
		if !errors.As(err, &nr) || nr.SandboxID != "sb-pending" {
			t.Fatalf("got %v, want SSHNotReadyError naming sb-pending", err)
		}
	})
	t.Run("another account's name and an unknown name answer alike", func(t *testing.T) {
		_, e1 := a.Authorize(t.Context(), "other", "fp-a")
		_, e2 := a.Authorize(t.Context(), "nope", "fp-a")
		if e1 != e2 || e1.Error() != e2.Error() {
			t.Errorf("another account's name: %v; unknown name: %v", e1, e2)
		}
	})

	t.Run("store fault is not a refusal", func(t *testing.T) {
		boom := errors.New("db down")
		_, err := sshauth.New(&fakeStore{err: boom}, nil, nil).Authorize(t.Context(), "sb-a", "fp-a")
		if !errors.Is(err, boom) {
			t.Errorf("got %v, want the store error wrapped", err)
		}
	})
}
