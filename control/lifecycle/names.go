package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"regexp"

	"github.com/sbxedge/sbx/control/store"
)

// nameRE is a DNS label (RFC 1123) that cannot be taken for a sandbox
// ID: IDs start "sbx-", names may not, so an SSH user or a path segment
// names one sandbox either way.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// ValidName reports whether s may name a sandbox.
func ValidName(s string) bool {
	return nameRE.MatchString(s) && !(len(s) >= 4 && s[:4] == "sbx-")
}

func validateName(name string) error {
	if name == "" || ValidName(name) {
		return nil
	}
	return invalid("name", "must be a DNS label: 1 to 63 lowercase letters, digits and hyphens, starting and ending with a letter or digit, and not starting with sbx-")
}

// Resolve finds the account's sandbox by ID or by name: a name is looked
// up among the account's sandboxes that have not ended. Another
// account's sandbox, and an unknown name, are ErrNotFound.
func (m *Manager) Resolve(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, error) {
	if ValidID(idOrName) || !ValidName(idOrName) {
		return m.Get(ctx, acct, idOrName)
	}
	sb, err := m.store.SandboxByName(ctx, acct.ID, idOrName)
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, ErrNotFound
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("sandbox named %s: %w", idOrName, err)
	}
	return sb, nil
}

// ErrNameTaken refuses a name another of the account's live sandboxes
// holds.
var ErrNameTaken = errors.New("name taken")

// NameTakenError is ErrNameTaken naming the name.
type NameTakenError struct{ Name string }

func (e *NameTakenError) Error() string {
	return fmt.Sprintf("another of this account's sandboxes that has not ended is named %q; use that one (PUT /api/v1/sandboxes/by-name/%s returns it), delete it, or pick another name", e.Name, e.Name)
}

// Unwrap lets errors.Is(err, ErrNameTaken) match.
func (e *NameTakenError) Unwrap() error { return ErrNameTaken }
