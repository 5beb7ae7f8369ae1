package store

import (
	"encoding/json"
	"time"
)

// Consumer says on whose behalf a sandbox was created: who drives it
// (actor: human, agent or automation) and the caller's own correlation
// IDs. It is recorded on the sandbox and copied onto each of its events,
// so usage and lifecycle can be attributed without joining other systems.
type Consumer struct {
	Actor     string `json:"actor,omitempty"`
	Project   string `json:"project,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	RunID     string `json:"run_id,omitempty"`
}

// IsZero reports whether no field is set.
func (c Consumer) IsZero() bool { return c == Consumer{} }

// JSON encodes the consumer for storage ("{}" when empty).
func (c Consumer) JSON() []byte {
	b, _ := json.Marshal(c)
	return b
}

// GrantToken is one grant of a sandbox: a (project, scopes) pair and, once
// minted at provisioning, the SHA-256 of the token written into the
// sandbox. The secret itself is never stored. A token has no stored
// expiry: it is valid while its sandbox is live and before the sandbox's
// deadline, so extending the deadline (or pausing it while suspended)
// renews it and ending the sandbox kills it, with nothing to keep in sync.
type GrantToken struct {
	ID        string
	SandboxID string
	AccountID string
	ProjectID string
	// Position is the grant's index in the create request.
	Position  int
	Scopes    []string
	Hash      []byte // nil until minted
	CreatedAt time.Time
	MintedAt  *time.Time
}

// AuditEntry is an append-only record of an access decision, such as a
// sandbox receiving scopes on a project.
type AuditEntry struct {
	ID        int64
	AccountID string
	ProjectID string
	SandboxID string
	// Caller is the credential that asked (an agent token ID).
	Caller  string
	Action  string // e.g. "grant"
	Scopes  []string
	Message string
	At      time.Time
}

// AuditFilter selects audit entries, newest first. Empty fields do not
// filter; AccountID is required.
type AuditFilter struct {
	AccountID string
	ProjectID string
	SandboxID string
	// Before is a cursor: only entries with a smaller ID. 0 starts at the
	// newest.
	Before int64
	Limit  int
}

// LiveCount is how many sandboxes an account holds on a platform in one
// state, for the active-sandboxes gauge.
type LiveCount struct {
	AccountID string
	Platform  string
	State     State
	Count     int
}
