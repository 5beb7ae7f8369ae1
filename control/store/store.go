package store

import (
	"context"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/internal/connlog"
)

// Store is control's persistence. It is an extension point with two
// implementations (Postgres and SQLite); both run the storetest suite.
type Store interface {
	Reader

	// InTx runs fn in one transaction and commits if fn returns nil.
	// Jobs enqueued through the Tx commit or roll back with it, which is
	// what makes a state change, its ledger row and its follow-up work
	// atomic.
	InTx(ctx context.Context, fn func(Tx) error) error

	// StartJobs starts working the durable job queue with the given workers
	// and periodic jobs. Periodic jobs run on one elected leader across
	// all control replicas sharing the database.
	StartJobs(ctx context.Context, cfg JobsConfig) error

	// StopJobs stops fetching jobs and waits for running ones to finish
	// or for ctx to end.
	StopJobs(ctx context.Context) error

	// Close releases the database. StopJobs must have returned first.
	Close() error

	// SubscribeEvents returns a channel that receives a value after a
	// transaction inserting events of sandboxID commits (coalesced: one
	// value may stand for many events), and a cancel func that must be
	// called. Subscribe before reading Events, then read again after each
	// value: nothing committed in between is missed. On Postgres the
	// signal crosses replicas (LISTEN/NOTIFY); on SQLite it is in-process.
	SubscribeEvents(sandboxID string) (<-chan struct{}, func())
}

// JobsConfig configures the job queue workers.
type JobsConfig struct {
	Workers    *river.Workers
	Periodic   []*river.PeriodicJob
	MaxWorkers int // per process; default 10
	// Queues are worked by this process besides the default queue, each
	// with MaxWorkers. A job inserted on a queue only one process works
	// runs in that process: lifecycle uses one to keep a repository
	// token, which is never written down, in the memory that holds it.
	Queues []string
	// RetryPolicy overrides River's default exponential backoff (hours
	// apart by the tenth attempt) for every worker.
	RetryPolicy river.ClientRetryPolicy
	// JobTimeout bounds each job's run for every worker that does not set
	// its own; zero is River's default (1 min).
	JobTimeout time.Duration
	// Instance names this process's job client the same way across its
	// restarts, so that at start it retries at once the jobs a crashed
	// run of it left `running`, which otherwise wait for the stuck-job
	// rescue (JobTimeout plus a minute). Jobs another client ran last are
	// never touched. No two live processes may share an Instance on one
	// database: sbx dev derives it from its data directory, which it
	// holds locked; a replica may use its pod's name, which no other live
	// pod has and which a restarted container keeps. Empty: a fresh ID
	// each start, and only the rescue recovers a crashed run's jobs.
	Instance string
}

// ListOptions pages through an account's sandboxes, newest first.
type ListOptions struct {
	AccountID string
	// Before is the cursor: only sandboxes created before the one with
	// this ID are returned. Empty starts at the newest.
	Before string
	Limit  int
	States []State // empty means all states
	// Name, when set, keeps only the sandbox of that name.
	Name string
	// Labels keeps only sandboxes carrying every one of these labels.
	Labels map[string]string
}

// Reader holds the queries that need no lock.
type Reader interface {
	SnapshotReader
	// AccountByTokenHash finds a token by the SHA-256 of its secret and
	// the account it belongs to. Revoked or expired tokens are
	// ErrNotFound.
	AccountByTokenHash(ctx context.Context, hash []byte, now time.Time) (Account, Token, error)
	// TokensRevokedSince lists tokens revoked after since (ID, AccountID
	// and RevokedAt set), oldest first, for telling the edge to end the
	// connections they admitted.
	TokensRevokedSince(ctx context.Context, since time.Time) ([]Token, error)
	Account(ctx context.Context, id string) (Account, error)
	Project(ctx context.Context, id string) (Project, error)
	Profile(ctx context.Context, name string) (Profile, error)
	Profiles(ctx context.Context) ([]Profile, error)

	// Sandbox returns a sandbox by id regardless of account; API code
	// compares AccountID itself so "not yours" reads as not found.
	Sandbox(ctx context.Context, id string) (Sandbox, error)
	Sandboxes(ctx context.Context, opts ListOptions) ([]Sandbox, error)
	SandboxByIdempotencyKey(ctx context.Context, accountID, key string) (Sandbox, error)
	// SandboxByName finds the account's sandbox of that name that has
	// not ended (not terminating, terminated or failed).
	SandboxByName(ctx context.Context, accountID, name string) (Sandbox, error)
	// SandboxesInStates lists sandboxes of any account in the given
	// states; used by the reaper and by reconciliation.
	SandboxesInStates(ctx context.Context, states ...State) ([]Sandbox, error)
	// StuckSandboxes lists sandboxes of any account in one of states
	// that entered it before `before` (wall clock), for the sweep that
	// settles sandboxes a lost job left changing state.
	StuckSandboxes(ctx context.Context, before time.Time, states ...State) ([]Sandbox, error)
	// EgressDecisions lists a sandbox's egress log newest first, those
	// with an ID below beforeID (0: from the newest), at most limit.
	EgressDecisions(ctx context.Context, sandboxID string, beforeID int64, limit int) ([]EgressDecision, error)
	// Credential reads one of an account's credentials; Credentials
	// lists them by name.
	Credential(ctx context.Context, accountID, name string) (Credential, error)
	Credentials(ctx context.Context, accountID string) ([]Credential, error)
	// ExpiredSandboxes lists sandboxes in pending or ready whose deadline
	// is before now, and suspended ones whose deadline is before now and
	// that were created maxLifetime or longer ago (the deadline clock is
	// paused while suspended; only the lifetime cap ends them). Filtering
	// suspended ones here, not in the caller, keeps a crowd of them from
	// filling the limit and starving ready sandboxes of the reaper.
	ExpiredSandboxes(ctx context.Context, now time.Time, maxLifetime time.Duration, limit int) ([]Sandbox, error)

	Sessions(ctx context.Context, sandboxID string) ([]Session, error)
	// Usage sums billable seconds of the account's sessions overlapping
	// [from, to), clipped to the window; an open session counts up to now.
	Usage(ctx context.Context, accountID string, from, to, now time.Time) ([]UsageRow, error)
	// Events lists a sandbox's events with ID greater than afterID, oldest
	// first.
	Events(ctx context.Context, sandboxID string, afterID int64) ([]Event, error)

	// SSHCredential finds a credential by public key fingerprint, expired
	// or not: the caller decides, so it can tell the user why it refused.
	SSHCredential(ctx context.Context, fingerprint string) (SSHCredential, error)

	// PreviewPorts lists a sandbox's exposed ports, lowest port first.
	PreviewPorts(ctx context.Context, sandboxID string) ([]PreviewPort, error)

	// Secrets lists an account's secrets by name; Secret reads one
	// (ErrNotFound when the account has none of that name).
	Secrets(ctx context.Context, accountID string) ([]Secret, error)
	Secret(ctx context.Context, accountID, name string) (Secret, error)
	// PreviewPortByLabel finds the port a preview host label names.
	PreviewPortByLabel(ctx context.Context, label string) (PreviewPort, error)
	// Shares lists a sandbox's share links, newest first, revoked and
	// expired ones included.
	Shares(ctx context.Context, sandboxID string) ([]Share, error)
	// ShareByID finds a share link by its ID.
	ShareByID(ctx context.Context, id string) (Share, error)
	// ShareByHash finds a share link by the SHA-256 of its secret; the
	// caller decides from it whether it is live.
	ShareByHash(ctx context.Context, hash []byte) (Share, error)
	// Services lists a sandbox's declared services by name.
	Services(ctx context.Context, sandboxID string) ([]Service, error)
	// GrantTokens lists a sandbox's grants in request order.
	GrantTokens(ctx context.Context, sandboxID string) ([]GrantToken, error)
	// GrantTokenByHash finds a minted grant token; the caller decides
	// from its sandbox whether it is active.
	GrantTokenByHash(ctx context.Context, hash []byte) (GrantToken, error)
	// Audit lists audit entries matching f, newest first.
	Audit(ctx context.Context, f AuditFilter) ([]AuditEntry, error)
	// Accounts lists every account by ID.
	Accounts(ctx context.Context) ([]Account, error)
	// LiveCounts counts sandboxes per account, platform and state, over
	// PodStates and suspended.
	LiveCounts(ctx context.Context) ([]LiveCount, error)

	// IdleCandidates lists ready sandboxes with an open compute session,
	// for the idle detector.
	IdleCandidates(ctx context.Context) ([]IdleCandidate, error)
	// Connections lists the connection log, newest first.
	Connections(ctx context.Context, f ConnectionFilter) ([]Connection, error)
	// LiveConnectionCounts counts live connections by kind, every account.
	LiveConnectionCounts(ctx context.Context) (map[connlog.Kind]int, error)
	// AccountIdleTimeout is the account's idle timeout override; 0 means
	// none (the deployment default applies).
	AccountIdleTimeout(ctx context.Context, accountID string) (time.Duration, error)

	// Webhooks lists an account's webhooks, oldest first.
	Webhooks(ctx context.Context, accountID string) ([]Webhook, error)
	// Webhook finds a webhook by ID regardless of account.
	Webhook(ctx context.Context, id string) (Webhook, error)
	// WebhookDeliveries lists a webhook's deliveries, newest first, at
	// most limit (0: a default page).
	WebhookDeliveries(ctx context.Context, webhookID string, limit int) ([]WebhookDelivery, error)
	// WebhookDelivery finds a delivery by ID.
	WebhookDelivery(ctx context.Context, id string) (WebhookDelivery, error)
	// PendingDeliveryBefore reports whether the webhook has a pending
	// delivery of the sandbox's created before `before`: one sandbox's
	// events reach a webhook in the order they happened.
	PendingDeliveryBefore(ctx context.Context, webhookID, sandboxID string, before time.Time) (bool, error)
}

// Tx is a transaction. It is valid only inside the InTx callback.
type Tx interface {
	Reader
	SnapshotWriter

	// LockAccount serialises transactions on one account until commit
	// (an advisory lock on Postgres; SQLite transactions are already
	// serialised).
	LockAccount(ctx context.Context, accountID string) error
	// CountHoldingPods is how many of the account's sandboxes are in
	// PodStates, counting this transaction's own changes. It reads a
	// counter that every insert, state change and delete of a sandbox
	// keeps in the same transaction (triggers in the schema), so it costs
	// one row however many sandboxes the account has. Call it under
	// LockAccount: on Postgres it may lock the counter's row until commit.
	CountHoldingPods(ctx context.Context, accountID string) (int, error)
	// LockAccountHolding is LockAccount, then Account and
	// CountHoldingPods read under the lock, in one round trip where the
	// database allows (a pipeline on Postgres): the lock is held until
	// commit, so every round trip inside it is one that every other
	// create in the account waits for.
	LockAccountHolding(ctx context.Context, accountID string) (Account, int, error)

	// SandboxForUpdate reads a sandbox and locks its row until commit.
	SandboxForUpdate(ctx context.Context, id string) (Sandbox, error)
	// InsertSandbox inserts sb; a duplicate (account, idempotency key),
	// or a name another of the account's live sandboxes holds, is
	// ErrConflict.
	InsertSandbox(ctx context.Context, sb Sandbox) error
	// InsertEgressDecision appends to a sandbox's egress log.
	InsertEgressDecision(ctx context.Context, d EgressDecision) error
	// PruneEgressLog deletes at most limit decisions made before
	// before, oldest first, and returns how many it deleted.
	PruneEgressLog(ctx context.Context, before time.Time, limit int) (int, error)
	// PutCredential creates a credential or replaces the upstream,
	// header and secret of the one of its name; DeleteCredential removes
	// one (ErrNotFound when missing); TouchCredential stamps its use.
	PutCredential(ctx context.Context, c Credential) error
	DeleteCredential(ctx context.Context, accountID, name string) error
	TouchCredential(ctx context.Context, accountID, name string, at time.Time) error
	// UpdateSandbox writes every mutable field of sb.
	UpdateSandbox(ctx context.Context, sb Sandbox) error

	// OpenSession inserts an open interval and returns its ID.
	OpenSession(ctx context.Context, s Session) (int64, error)
	// CloseSessions closes the sandbox's open sessions of kind at `at` with
	// reason and returns how many it closed (0 or 1 in a healthy ledger).
	CloseSessions(ctx context.Context, sandboxID string, kind SessionKind, at time.Time, reason string) (int, error)

	// InsertEvent appends e, copying the sandbox's Consumer onto it.
	// Callers hold the sandbox's row lock (SandboxForUpdate) or inserted
	// the sandbox in this transaction, so one sandbox's events commit in
	// ID order: the event stream's resume by ID relies on it.
	InsertEvent(ctx context.Context, e Event) error

	UpsertAccount(ctx context.Context, a Account) error
	UpsertProject(ctx context.Context, p Project) error
	InsertToken(ctx context.Context, t Token) error
	UpsertProfile(ctx context.Context, p Profile) error
	// InsertSSHCredential stores a credential; a duplicate ID or
	// fingerprint is ErrConflict.
	InsertSSHCredential(ctx context.Context, c SSHCredential) error
	// PutSecret stores a secret, replacing the sealed value (and
	// UpdatedAt, keeping CreatedAt) of one of the same name.
	PutSecret(ctx context.Context, s Secret) error
	// DeleteSecret removes a secret; ErrNotFound when there is none.
	DeleteSecret(ctx context.Context, accountID, name string) error
	// PutPreviewPort exposes p.Port of p.SandboxID. Exposing a port again
	// updates Access, HostPolicy and Name and keeps the stored Label and
	// CreatedAt, so a URL handed out stays valid; the stored row is
	// returned. A Label already used by another port, or a Name another
	// port of the sandbox has, is ErrConflict.
	PutPreviewPort(ctx context.Context, p PreviewPort) (PreviewPort, error)
	// InsertShare stores a share link; a duplicate ID or hash is
	// ErrConflict.
	InsertShare(ctx context.Context, s Share) error
	// RevokeShare revokes a share link (idempotent: an already revoked
	// link keeps its first revocation time); none is ErrNotFound.
	RevokeShare(ctx context.Context, id string, at time.Time) error
	// MarkShareUsed records the first use of a share link at `at` and
	// reports whether this call was the first.
	MarkShareUsed(ctx context.Context, id string, at time.Time) (first bool, err error)
	// DeletePreviewPort removes one exposed port; none is ErrNotFound.
	DeletePreviewPort(ctx context.Context, sandboxID string, port int) error
	// PutService declares s (or replaces the declaration of the same
	// name, keeping CreatedAt) and returns the stored row.
	PutService(ctx context.Context, s Service) (Service, error)
	// DeleteService removes one declaration; none is ErrNotFound.
	DeleteService(ctx context.Context, sandboxID, name string) error
	// SetAccountIdleTimeout overrides the idle timeout for one account's
	// sandboxes; 0 clears the override. Whole seconds are kept.
	SetAccountIdleTimeout(ctx context.Context, accountID string, d time.Duration) error

	// InsertGrantToken stores a grant (Hash may be nil until minted).
	InsertGrantToken(ctx context.Context, g GrantToken) error
	// SetGrantTokenHash records a freshly minted token's hash, replacing
	// (and so killing) the token of an earlier provisioning attempt.
	SetGrantTokenHash(ctx context.Context, id string, hash []byte, at time.Time) error
	// InsertAudit appends an audit entry.
	InsertAudit(ctx context.Context, a AuditEntry) error
	// RevokeToken revokes an API token by ID (idempotent: an already
	// revoked token keeps its first revocation time).
	RevokeToken(ctx context.Context, id string, at time.Time) error
	// ReportConnections writes a reporter's batch of connection records
	// and renews the lease of its live ones to now plus the batch's lease.
	ReportConnections(ctx context.Context, b connlog.Batch, now time.Time) error
	// SettleLostConnections ends, as edge_lost, live connections whose
	// lease ran out before now.
	SettleLostConnections(ctx context.Context, now time.Time) (int, error)

	// InsertWebhook stores a webhook; a duplicate ID is ErrConflict.
	InsertWebhook(ctx context.Context, w Webhook) error
	// DeleteWebhook removes a webhook and its deliveries; none is
	// ErrNotFound.
	DeleteWebhook(ctx context.Context, id string) error
	// InsertWebhookDelivery stores a pending delivery.
	InsertWebhookDelivery(ctx context.Context, d WebhookDelivery) error
	// RecordWebhookAttempt counts one attempt at a delivery and records
	// its outcome; a missing delivery is ErrNotFound.
	RecordWebhookAttempt(ctx context.Context, deliveryID string, a WebhookAttempt) error
	// RequeueWebhookDelivery makes a delivery pending again, due at `at`
	// (a redelivery); its attempts keep counting.
	RequeueWebhookDelivery(ctx context.Context, deliveryID string, at time.Time) error

	// Enqueue inserts a durable job that becomes visible when the
	// transaction commits.
	Enqueue(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) error
}
