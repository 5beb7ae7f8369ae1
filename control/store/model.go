// Package store holds control's durable state: accounts, tokens, profiles,
// sandboxes, the billing ledger and audit events. Postgres (pgx) is the
// production backend and SQLite serves `sbx dev`; both pass the same
// conformance suite (storetest).
package store

import (
	"encoding/json"
	"errors"
	"time"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// Errors every backend returns, so callers can branch with errors.Is.
var (
	ErrNotFound = errors.New("not found")
	ErrConflict = errors.New("conflict")
	// ErrUnavailable marks an error that came from the database being
	// unreachable or dropping the connection (a restart, a failover, a
	// terminated backend), not from the statement: the same call may
	// succeed once the database is back.
	ErrUnavailable = errors.New("database unavailable")
	// ErrFull marks an error that came from the database's disk being
	// full: writes fail until someone frees space on the server.
	ErrFull = errors.New("database storage full")
)

// Mark returns err, also matching sentinel (ErrUnavailable, ErrFull)
// with errors.Is, with err's message: how a backend says what kind of
// failure a driver error is without callers knowing the driver.
func Mark(err, sentinel error) error { return marked{err, sentinel} }

type marked struct{ err, sentinel error }

func (m marked) Error() string   { return m.err.Error() }
func (m marked) Unwrap() []error { return []error{m.err, m.sentinel} }

// State is a sandbox lifecycle state. The transition table lives in
// control/lifecycle; the store only records what lifecycle decides.
type State string

const (
	StatePending     State = "pending"
	StateReady       State = "ready"
	StateSuspending  State = "suspending"
	StateSuspended   State = "suspended"
	StateRestoring   State = "restoring"
	StateTerminating State = "terminating"
	StateTerminated  State = "terminated"
	StateFailed      State = "failed"
)

// States is every sandbox state.
var States = []State{
	StatePending, StateReady, StateSuspending, StateSuspended,
	StateRestoring, StateTerminating, StateTerminated, StateFailed,
}

// Final reports whether s is a terminal state.
func (s State) Final() bool { return s == StateTerminated || s == StateFailed }

// PodStates are the states in which a sandbox holds a pod (or is about
// to, or still does), counted against the account's concurrency limit.
// Suspended sandboxes do not count: they hold no pod, only a snapshot.
// This is not whether a connection may reach a sandbox (a suspended one
// wakes on traffic): that is control/lifecycle's AdmissionOf.
var PodStates = []State{StatePending, StateReady, StateSuspending, StateRestoring}

// Account owns sandboxes, tokens and the ledger.
type Account struct {
	ID               string
	Name             string
	SandboxesEnabled bool
	ConcurrentLimit  int
	// AllowedPlatforms, when non-empty, restricts which platforms the
	// account may create.
	AllowedPlatforms []string
	MonthlyMinutes   int
	// SnapshotLimit is how many snapshots (creating or ready) the
	// account may keep at once; 0: the deployment's default.
	SnapshotLimit int
	CreatedAt     time.Time
}

// Project groups an account's work for reporting; grants name a project
// and scopes.
type Project struct {
	ID        string
	AccountID string
	Name      string
	CreatedAt time.Time
}

// TokenKind distinguishes credentials; only agent tokens may call the
// sandbox API.
type TokenKind string

const (
	TokenAgent   TokenKind = "agent"
	TokenProject TokenKind = "project"
)

// Token is a stored credential. Only the SHA-256 of the secret is kept.
type Token struct {
	ID        string
	AccountID string
	Kind      TokenKind
	Name      string
	Hash      []byte
	CreatedAt time.Time
	ExpiresAt *time.Time
	RevokedAt *time.Time
}

// Profile maps a name to a platform and shape.
type Profile struct {
	Name     string
	Platform string
	CPU      float64
	MemoryMB int
	DiskGB   int
	Image    string
}

// Grant is a (project, scopes) pair a sandbox receives at create time.
type Grant struct {
	ProjectID string   `json:"project_id"`
	Scopes    []string `json:"scopes"`
}

// Sandbox is one account-owned environment.
type Sandbox struct {
	ID        string
	AccountID string
	ProjectID string // reporting tag; empty when unset
	Profile   string
	Platform  string
	State     State

	CreatedAt    time.Time
	DeadlineAt   time.Time
	ReadyAt      *time.Time
	SuspendedAt  *time.Time
	TerminatedAt *time.Time
	// EndReason says why the sandbox left ready or failed
	// (explicit_delete, deadline, provision_failed, ...).
	EndReason string

	// Endpoint is where the sandbox's sshd listens, reachable from control
	// and edge only; HostKey is its pinned public key in authorized_keys form.
	Endpoint  string
	SSHUser   string
	Workspace string
	HostKey   string
	// ForwardEndpoint is where the sandbox's TCP forwarder listens
	// (internal/podtcp), reachable from the edge only; empty when it has
	// none.
	ForwardEndpoint string

	Grants []Grant
	// Consumer is who the sandbox is for (see Consumer).
	Consumer Consumer

	// IdempotencyKey and RequestHash make POST /sandboxes safe to retry.
	IdempotencyKey string
	RequestHash    string

	// LeaseHolder and LeaseUntil lease a restoring sandbox to the process
	// restoring it, which renews LeaseUntil while it works; once it has
	// passed, another process may take the restore over. RestoreAttempts
	// counts the attempts of the current wake against the restore budget.
	// All three are zero outside restoring.
	LeaseHolder     string
	LeaseUntil      *time.Time
	RestoreAttempts int

	// Name is the account's name for the sandbox ("" for none), unique
	// among its sandboxes that have not ended; a second live sandbox of
	// the same name is ErrConflict at insert.
	Name string
	// Labels are the caller's tags, filtered on by List.
	Labels map[string]string
	// NoWakeOnTraffic keeps a suspended sandbox suspended when traffic
	// comes for it: only an explicit resume brings it back.
	NoWakeOnTraffic bool

	// FromSnapshot is the snapshot a fork's workspace started as.
	FromSnapshot string
	// RestoreSnapshot is the snapshot an in-place restore under way
	// brings back; empty outside such a restore.
	RestoreSnapshot string
	// RecreatedFrom and RecreatedAs link a recreated sandbox and its
	// successor.
	RecreatedFrom string
	RecreatedAs   string
	// CreateRequest is the create request as it was asked, without any
	// repository token, JSON encoded: what a recreate provisions again.
	CreateRequest []byte
	// Env are NAME=value pairs every process of the sandbox sees.
	Env map[string]string
	// Secrets name the account secrets delivered into the sandbox; the
	// values stay in the account's secret store.
	Secrets []SecretRef
	// IdleTimeout is the sandbox's own idle timeout; 0 means its
	// account's (or the default).
	IdleTimeout time.Duration
	// IgnoreBusy lets the idle detector suspend the sandbox while work
	// runs in it (keep_awake_while_busy false).
	IgnoreBusy bool
	// RetentionDays bounds how long the sandbox stays suspended before it
	// is deleted; 0: until its deadline. RetentionWarnedAt is when the
	// day-before warning event was written (nil: not yet).
	RetentionDays     int
	RetentionWarnedAt *time.Time
	// Network is the sandbox's own egress policy, within its profile's;
	// nil follows the profile's.
	Network *egresspolicy.Spec
	// Credentials names the account's credential routes the sandbox may
	// use through the egress gateway.
	Credentials []string
}

// SecretRef names an account secret a sandbox receives and how: As is
// "env" (an environment variable of the same name) or "file".
type SecretRef struct {
	Name string `json:"name"`
	As   string `json:"as"`
}

// Secret is an account secret as stored: its value sealed (see
// lifecycle's secret box), never in the clear.
type Secret struct {
	AccountID string
	Name      string
	Sealed    []byte
	CreatedAt time.Time
	UpdatedAt time.Time
}

// EnvJSON encodes the environment for storage.
func (s *Sandbox) EnvJSON() []byte {
	if len(s.Env) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(s.Env)
	return b
}

// SecretsJSON encodes the secret references for storage.
func (s *Sandbox) SecretsJSON() []byte {
	if len(s.Secrets) == 0 {
		return []byte("[]")
	}
	b, _ := json.Marshal(s.Secrets)
	return b
}

// CredentialsJSON encodes the credential names for storage, "" for none.
func (s *Sandbox) CredentialsJSON() string {
	if len(s.Credentials) == 0 {
		return ""
	}
	b, _ := json.Marshal(s.Credentials)
	return string(b)
}

// NetworkJSON encodes the network policy for storage, "" for none.
func (s *Sandbox) NetworkJSON() string {
	if s.Network == nil {
		return ""
	}
	b, _ := json.Marshal(s.Network)
	return string(b)
}

// LabelsJSON encodes the labels for storage.
func (s *Sandbox) LabelsJSON() []byte {
	if len(s.Labels) == 0 {
		return []byte("{}")
	}
	b, _ := json.Marshal(s.Labels)
	return b
}

// GrantsJSON encodes the grants for storage.
func (s *Sandbox) GrantsJSON() []byte {
	if s.Grants == nil {
		return []byte("[]")
	}
	b, _ := json.Marshal(s.Grants)
	return b
}

// SessionKind separates compute time from snapshot storage time.
type SessionKind string

const (
	SessionCompute SessionKind = "compute"
	SessionStorage SessionKind = "storage"
)

// Session is one append-only billing interval. A row is inserted open
// (EndedAt nil) and closed exactly once.
type Session struct {
	ID        int64
	SandboxID string
	AccountID string
	Platform  string
	Kind      SessionKind
	// SnapshotID names the snapshot a storage line bills; empty for the
	// sandbox's own lines.
	SnapshotID string
	StartedAt  time.Time
	EndedAt    *time.Time
	EndReason  string
}

// Event is a lifecycle or audit record.
type Event struct {
	ID        int64
	SandboxID string
	AccountID string
	Type      string // e.g. "state", "grant"
	State     State
	Reason    string
	Actor     string
	Message   string
	At        time.Time
	// Consumer is the sandbox's consumer block, copied by the store when
	// the event is inserted.
	Consumer Consumer
}

// UsageRow is billable seconds per platform and kind.
type UsageRow struct {
	Platform string
	Kind     SessionKind
	Seconds  float64
}

// SSHCredential binds one SSH public key, by fingerprint, to one sandbox
// until ExpiresAt. The private key is handed to the caller once and never
// stored: a leaked database row cannot be used to log in.
type SSHCredential struct {
	ID        string
	SandboxID string
	AccountID string
	// Fingerprint is ssh.FingerprintSHA256 of the public key ("SHA256:...").
	Fingerprint string
	// TokenID is the agent token that minted the credential ("" when
	// unknown); the credential is refused once that token is revoked.
	TokenID   string
	CreatedAt time.Time
	ExpiresAt time.Time
	// TokenRevoked is read, never written: whether TokenID was revoked.
	TokenRevoked bool
}

// WarmPod is a row of the k8s warm pool: a booted pod of a profile, free
// until ClaimedBy names the sandbox that took it.
type WarmPod struct {
	Pod       string
	Profile   string
	Image     string
	ClaimedBy string
	CreatedAt time.Time
	ClaimedAt *time.Time
}

// UTCPtr is t in UTC, or nil.
func UTCPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
