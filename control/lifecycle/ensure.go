package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// ensureRounds bounds Ensure's look-up-or-create loop: each lost race
// means another caller created the sandbox, which the next look-up finds;
// only a sandbox ended between the two could make a round lose again.
const ensureRounds = 3

// Ensure returns the account's sandbox named name that has not ended, or
// creates it from req (its name set to name) when there is none:
// created says which. Concurrent ensures of one name make one sandbox:
// the store lets one insert hold a live name, and the others find it.
// A body naming another name is a FieldError.
func (m *Manager) Ensure(ctx context.Context, acct store.Account, name string, req CreateRequest) (sb store.Sandbox, created bool, err error) {
	if name == "" || !ValidName(name) {
		return sb, false, validateName(cmp.Or(name, "-"))
	}
	if req.Name != "" && req.Name != name {
		return sb, false, invalid("name", "is %q in the body but %q in the path; leave it out of the body", req.Name, name)
	}
	req.Name = name
	for range ensureRounds {
		sb, err = m.store.SandboxByName(ctx, acct.ID, name)
		if err == nil {
			return sb, false, nil
		}
		if !errors.Is(err, store.ErrNotFound) {
			return sb, false, fmt.Errorf("ensure %s: %w", name, err)
		}
		sb, _, err = m.Create(ctx, acct, req)
		if err == nil {
			return sb, true, nil
		}
		// Lost the race (the name is taken now), or the account's limit
		// was reached by the very sandbox a concurrent ensure created:
		// look again before answering.
		if !errors.Is(err, ErrNameTaken) && !errors.Is(err, ErrLimit) {
			return sb, false, err
		}
		if errors.Is(err, ErrLimit) {
			if prev, lerr := m.store.SandboxByName(ctx, acct.ID, name); lerr == nil {
				return prev, false, nil
			}
			return store.Sandbox{}, false, err
		}
	}
	return store.Sandbox{}, false, fmt.Errorf("ensure %s: %w", name, err)
}
