// Package sshauth answers the SSH broker's question "may this key, offered
// for this username, reach a sandbox, and where is it?" from control's
// store, for control's internal API. It does not import the edge; its
// refusals are the ones internal/edgeapi declares for both sides.
package sshauth

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Route is where an accepted credential leads.
type Route struct {
	SandboxID string
	Addr      string // the sandbox sshd's host:port
	User      string // login name on the sandbox, the certificate principal
	HostKey   string // pinned, authorized_keys form
	ExpiresAt time.Time
}

// Reader is the subset of store.Reader the authorizer uses.
type Reader interface {
	SSHCredential(ctx context.Context, fingerprint string) (store.SSHCredential, error)
	Sandbox(ctx context.Context, id string) (store.Sandbox, error)
	SandboxByName(ctx context.Context, accountID, name string) (store.Sandbox, error)
}

// Authorizer checks credentials against the store. It is safe for
// concurrent use.
type Authorizer struct {
	store Reader
	now   func() time.Time
	log   *slog.Logger
}

// New returns an Authorizer. now may be nil (time.Now); tests pass a clock.
func New(r Reader, now func() time.Time, log *slog.Logger) *Authorizer {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Authorizer{store: r, now: now, log: log}
}

// Authorize maps (username, fingerprint) to a Route or a refusal wrapping
// one of edgeapi's ErrSSH* refusals. Any other error is a store fault.
// The username is the sandbox's ID or its name; the Route, and the
// not-ready refusal (*edgeapi.SSHNotReadyError), carry the ID, so the
// edge never takes a name for an ID.
//
// The order of checks matters: the credential must belong to the sandbox
// named before anything about that sandbox (expiry, state) is revealed, so
// a key for sandbox A learns nothing about sandbox B.
func (a *Authorizer) Authorize(ctx context.Context, username, fingerprint string) (Route, error) {
	cred, err := a.store.SSHCredential(ctx, fingerprint)
	if errors.Is(err, store.ErrNotFound) {
		return Route{}, edgeapi.ErrSSHUnknownKey
	}
	if err != nil {
		return Route{}, fmt.Errorf("look up ssh credential: %w", err)
	}
	if cred.TokenRevoked {
		// The token that minted it was revoked (a leak being cleaned up):
		// the key is as good as unknown, and the client is told nothing
		// more. The reason is for the operator.
		a.log.InfoContext(ctx, "ssh credential refused: its token was revoked",
			"credential_id", cred.ID, "token_id", cred.TokenID, "sandbox_id", cred.SandboxID)
		return Route{}, edgeapi.ErrSSHUnknownKey
	}
	if cred.SandboxID != username {
		ok, err := a.namesCredSandbox(ctx, cred, username)
		if err != nil {
			return Route{}, err
		}
		if !ok {
			return Route{}, edgeapi.ErrSSHWrongSandbox
		}
	}
	sb, err := a.store.Sandbox(ctx, cred.SandboxID)
	if errors.Is(err, store.ErrNotFound) {
		// The credential row references the sandbox, so this is only
		// reachable if rows were removed by hand; refuse quietly.
		return Route{}, edgeapi.ErrSSHUnknownSandbox
	}
	if err != nil {
		return Route{}, fmt.Errorf("look up sandbox %s: %w", cred.SandboxID, err)
	}
	if sb.AccountID != cred.AccountID {
		a.log.ErrorContext(ctx, "ssh credential account differs from its sandbox's", "sandbox_id", sb.ID, "credential_id", cred.ID)
		return Route{}, edgeapi.ErrSSHUnknownKey
	}
	// An ended sandbox is reported before expiry: "create a new sandbox"
	// is the advice that helps, a new credential would not.
	admission := lifecycle.AdmissionOf(sb)
	if admission == lifecycle.Ended {
		return Route{}, edgeapi.ErrSSHSandboxEnded
	}
	if !a.now().Before(cred.ExpiresAt) {
		return Route{}, edgeapi.ErrSSHExpired
	}
	// Starting or Wakeable: the broker wakes it (or waits) and asks again.
	if admission != lifecycle.Ready || sb.Endpoint == "" || sb.HostKey == "" {
		return Route{}, &edgeapi.SSHNotReadyError{SandboxID: sb.ID, State: string(sb.State)}
	}
	return Route{
		SandboxID: sb.ID, Addr: sb.Endpoint, User: sb.SSHUser, HostKey: sb.HostKey,
		ExpiresAt: cred.ExpiresAt,
	}, nil
}

// namesCredSandbox reports whether username is the name of the
// credential's sandbox. A name is looked up only among the credential's
// own account's sandboxes that have not ended (where names are unique),
// so another account's name, an ended sandbox's old name and an unknown
// name all come back false: the same ErrSSHWrongSandbox as any ID the key
// does not belong to, and probing names learns nothing.
func (a *Authorizer) namesCredSandbox(ctx context.Context, cred store.SSHCredential, username string) (bool, error) {
	if lifecycle.ValidID(username) || !lifecycle.ValidName(username) {
		return false, nil
	}
	sb, err := a.store.SandboxByName(ctx, cred.AccountID, username)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("look up sandbox named %s: %w", username, err)
	}
	return sb.ID == cred.SandboxID, nil
}
