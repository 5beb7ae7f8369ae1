package lifecycle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// ReasonRecreate ends a sandbox replaced by a recreate.
const ReasonRecreate = "recreate"

// ErrNoCreateRequest refuses a recreate of a sandbox whose create request
// was not kept (created before requests were stored).
var ErrNoCreateRequest = errors.New("this sandbox's create request was not kept (it predates recreate); create a new sandbox instead")

// Recreate destroys a sandbox and provisions a new one from its stored
// create request, in one transaction: the old one ends (reason recreate,
// its open line closed, its teardown enqueued) and records recreated_as,
// the new one is inserted pending with recreated_from and its
// provisioning enqueued. The name passes to the successor. A repository
// is cloned again if it needs no token (tokens are never kept); one that
// did is refused. Recreating an already recreated sandbox returns its
// successor.
func (m *Manager) Recreate(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, error) {
	old, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	if old.RecreatedAs != "" {
		return m.Get(ctx, acct, old.RecreatedAs)
	}
	if len(old.CreateRequest) == 0 {
		return store.Sandbox{}, ErrNoCreateRequest
	}
	var req CreateRequest
	if err := json.Unmarshal(old.CreateRequest, &req); err != nil {
		return store.Sandbox{}, fmt.Errorf("decode create request of %s: %w", old.ID, err)
	}
	if req.Repo != nil && repoNeededToken(old) {
		return store.Sandbox{}, invalid("repo", "the repository needed a token, which is never kept; create a new sandbox with it")
	}
	req.recreate = &old
	req.Actor = "account:" + acct.ID
	sb, _, err := m.Create(ctx, acct, req)
	if err != nil {
		return store.Sandbox{}, err
	}
	m.log.InfoContext(ctx, "sandbox recreated", "sandbox_id", old.ID, "recreated_as", sb.ID)
	return sb, nil
}

// repoNeededToken reports whether old's create gave a repository token
// (the stored request says so in repo_auth, never with the token).
func repoNeededToken(old store.Sandbox) bool {
	var probe struct {
		RepoAuth bool `json:"repo_auth"`
	}
	_ = json.Unmarshal(old.CreateRequest, &probe)
	return probe.RepoAuth
}

// endRecreated ends the sandbox a recreate replaces, inside the
// successor's create transaction, and points it at the successor. One
// already ended (failed, say) only gains the pointer; one another
// recreate got to first is a conflict.
func (m *Manager) endRecreated(ctx context.Context, tx store.Tx, oldID, newID, actor string, now time.Time) error {
	old, err := tx.SandboxForUpdate(ctx, oldID)
	if err != nil {
		return err
	}
	if old.RecreatedAs != "" {
		return &StateError{State: "recreated as " + old.RecreatedAs, Action: "recreate"}
	}
	old.RecreatedAs = newID
	if AdmissionOf(old) == Ended {
		return tx.UpdateSandbox(ctx, old)
	}
	_, err = endLocked(ctx, tx, old, ReasonRecreate, actor, now, now)
	return err
}
