// Package lifecycle is the sandbox state machine. Every transition runs in
// one store transaction together with the ledger row it implies and the
// durable job that carries it forward, so a crash at any point neither
// loses nor doubles a billing interval.
package lifecycle

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/riverqueue/river"

	"github.com/sbxedge/sbx/activity"
	"github.com/sbxedge/sbx/auth/hostkey"
	"github.com/sbxedge/sbx/control/provider"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/outage"
)

// Config tunes the lifecycle. Zero values take the defaults in New.
type Config struct {
	// DefaultDeadline applies when a create names none (spec: 60 min).
	DefaultDeadline time.Duration
	// MaxLifetime is the absolute cap from creation (spec: 7 days).
	MaxLifetime time.Duration
	// ProvisionTimeout fails a sandbox still pending after this long.
	ProvisionTimeout time.Duration
	// ReapInterval is how often the reaper looks for expired sandboxes.
	ReapInterval time.Duration
	// IdleTimeout is how long a ready sandbox may go without activity
	// before it is suspended (default 5 min); accounts may override it.
	// Idle offload runs only with an Activity store and a provider that
	// implements provider.Suspender.
	IdleTimeout time.Duration
	// NoIdleOffload turns the idle detector off: sandboxes stay ready until
	// their deadline. For deployments whose activity this process cannot
	// see (an edge in another process without shared Redis).
	NoIdleOffload bool
	// IdleCheckInterval is the idle detector's tick (default a third of
	// IdleTimeout, between 1 s and 10 s); idleness is judged to within it.
	IdleCheckInterval time.Duration
	// RestoreAttempts is the restore budget of one wake (default 5): after
	// that many failed attempts the sandbox fails (restore_failed).
	RestoreAttempts int
	// RestoreLease is how long a restore survives its restorer's silence
	// (default 3 s): the restoring process renews it three times as
	// often, and once it lapses the backstop sweep, run every half lease
	// (at least 1 s), takes the restore over on any replica.
	RestoreLease time.Duration
	// ReconcileInterval is how often a running control compares its
	// records with the provider (see ReconcileEvery): a pod that vanished
	// or one with no sandbox behind it is handled within it (default 1 min;
	// a pass lists every sandbox pod and snapshot, once per replica).
	ReconcileInterval time.Duration
	// SettleAfter is how long a sandbox may stay suspending or restoring
	// before the sweep settles it (see SettleStuck): past every attempt
	// its job may make (default five provisioning timeouts and a minute).
	SettleAfter time.Duration
	// MaxSnapshots is how many snapshots (creating or ready) one account
	// may keep (default 20) unless the account has its own
	// snapshot_limit (sbx admin account set --snapshot-limit); a snapshot
	// past the limit is refused, naming the count and the limit.
	MaxSnapshots int
	// DefaultProfile is what a create that names no profile gets (the k8s
	// catalog's defaultProfile; sbx dev: devseed.DefaultProfile). Empty:
	// such a create is refused, naming the field.
	DefaultProfile string
	// Network is each profile's egress policy by profile name; a profile
	// not named here is open. Parsed by whoever builds the Config (the
	// catalog, devseed), so a bad policy fails at start.
	Network map[string]*egresspolicy.Policy
	// EgressProxy is the egress gateway's host:port as sandboxes reach
	// it; when set, every sandbox gets HTTP_PROXY, HTTPS_PROXY, their
	// lowercase forms and NO_PROXY with its own proxy credential
	// (provider.Spec.Env). Empty: no proxy environment.
	EgressProxy string
	// EgressLogRetention is how long the egress gateway's decisions are
	// kept (GET .../egress); the reaper deletes older ones (default 14
	// days).
	EgressLogRetention time.Duration
	// BusyCPU is the CPU use, in cores, at which a sandbox counts as
	// working and is not suspended for idleness (default 0.1).
	BusyCPU float64
	// SecretsKey seals account secrets (AES-256-GCM, SecretKeySize
	// bytes; see ParseSecretsKey). Empty: secrets are refused.
	SecretsKey []byte
}

func (c *Config) setDefaults() {
	c.DefaultDeadline = cmp.Or(c.DefaultDeadline, 60*time.Minute)
	c.MaxLifetime = cmp.Or(c.MaxLifetime, 7*24*time.Hour)
	c.ProvisionTimeout = cmp.Or(c.ProvisionTimeout, 5*time.Minute)
	c.ReapInterval = cmp.Or(c.ReapInterval, 30*time.Second)
	c.IdleTimeout = cmp.Or(c.IdleTimeout, 5*time.Minute)
	c.BusyCPU = cmp.Or(c.BusyCPU, 0.1)
	c.EgressLogRetention = cmp.Or(c.EgressLogRetention, 14*24*time.Hour)
	if c.IdleCheckInterval == 0 {
		// River on Postgres does not honour sub-second periodic intervals.
		// At most 10 s, so an account overriding the timeout below the
		// default is still checked often; a check is one query.
		c.IdleCheckInterval = min(max(c.IdleTimeout/3, time.Second), 10*time.Second)
	}
	if c.RestoreAttempts <= 0 {
		c.RestoreAttempts = 5
	}
	if c.RestoreLease <= 0 {
		c.RestoreLease = 3 * time.Second
	}
	if c.SettleAfter <= 0 {
		c.SettleAfter = 5*c.ProvisionTimeout + time.Minute
	}
	if c.MaxSnapshots <= 0 {
		c.MaxSnapshots = 20
	}
	if c.ReconcileInterval <= 0 {
		c.ReconcileInterval = time.Minute
	}
}

// Conns is the subset of the pod connection pool lifecycle uses: it drops
// pooled connections to sandboxes that end.
type Conns interface {
	Forget(sandboxID string)
}

// Manager drives sandboxes through their states.
type Manager struct {
	cfg      Config
	store    store.Store
	prov     provider.Provider
	hostKeys *hostkey.Deriver
	caKey    string // CA public key, authorized_keys form
	conns    Conns
	pods     Pods // nil: services are stored but not started
	log      *slog.Logger
	now      func() time.Time
	metrics  *Metrics
	act      Activity
	// publishFails logs failed state-change publications once per
	// outage of the activity store, not once per state change.
	publishFails *outage.Log
	// notify carries state-change notifications when there is no
	// Activity store (tests, or idle offload disabled).
	notify activity.Fanout
	// queue is this Manager's own job queue: provisioning that needs a
	// token held in tokens runs here, where the token is.
	queue  string
	tokens tokenVault
	// reserved are the host's own ports (see ReservePort).
	reserved reservedPorts
	// ending are this process's ends not yet told to the edges, which
	// their teardowns wait for.
	ending endings
}

// Deps are the Manager's collaborators.
type Deps struct {
	Store    store.Store
	Provider provider.Provider
	HostKeys *hostkey.Deriver
	// UserCAKey is the internal CA public key the sandbox sshd trusts.
	UserCAKey string
	Conns     Conns
	// Pods reaches sandboxes' inits, to start their services.
	Pods    Pods
	Logger  *slog.Logger
	Metrics *Metrics
	// Activity is read by the idle detector and carries wake
	// notifications; nil disables idle offload.
	Activity Activity
	// Now is the clock; tests inject one.
	Now func() time.Time
	// Events is told of every event written, in its transaction
	// (webhook deliveries); nil: none.
	Events EventHook
}

// New builds a Manager.
func New(cfg Config, d Deps) *Manager {
	cfg.setDefaults()
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Metrics == nil {
		d.Metrics = NewMetrics(nil)
	}
	if d.Events != nil {
		d.Store = hookedStore{d.Store, d.Events}
	}
	return &Manager{
		cfg: cfg, store: d.Store, prov: d.Provider, hostKeys: d.HostKeys,
		caKey: d.UserCAKey, conns: d.Conns, pods: d.Pods, log: d.Logger, now: d.Now, metrics: d.Metrics,
		act: d.Activity, queue: newPrefixedID("repo_"),
		publishFails: outage.New(d.Logger, "publish state change", d.Now),
	}
}

// Config returns the effective configuration.
func (m *Manager) Config() Config { return m.cfg }

// CreateRequest is POST /sandboxes after JSON decoding.
type CreateRequest struct {
	Profile         string          `json:"profile"`
	DeadlineMinutes *int            `json:"deadline_minutes,omitempty"`
	ProjectID       string          `json:"project_id,omitempty"`
	Grants          []store.Grant   `json:"grants,omitempty"`
	Consumer        *store.Consumer `json:"consumer,omitempty"`
	// Services are declared with the sandbox and start when it is ready.
	Services []ServiceSpec `json:"services,omitempty"`
	// Repo is cloned into the workspace before the sandbox is ready.
	Repo *RepoSpec `json:"repo,omitempty"`
	// Name names the sandbox within the account (see ValidName); it is
	// usable wherever an ID is, while the sandbox has not ended.
	Name string `json:"name,omitempty"`
	// Labels tag the sandbox for lists (see validateLabels).
	Labels map[string]string `json:"labels,omitempty"`
	// WakeOnTraffic false keeps a suspended sandbox suspended until it is
	// resumed; default true.
	WakeOnTraffic *bool `json:"wake_on_traffic,omitempty"`
	// FromSnapshot makes the sandbox a fork: its workspace starts as the
	// snapshot's (snap-...); the profile defaults to the snapshot's.
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Env is set in every process of the sandbox (see validateEnv).
	Env map[string]string `json:"env,omitempty"`
	// Secrets name account secrets delivered as env or files.
	Secrets []store.SecretRef `json:"secrets,omitempty"`
	// IdleTimeoutMinutes is the sandbox's own idle timeout, at most its
	// account's; KeepAwakeWhileBusy (default true) lets running work keep
	// it awake; RetentionDays deletes it after that long suspended.
	IdleTimeoutMinutes *int  `json:"idle_timeout_minutes,omitempty"`
	KeepAwakeWhileBusy *bool `json:"keep_awake_while_busy,omitempty"`
	RetentionDays      *int  `json:"retention_days,omitempty"`
	// Network narrows the profile's egress policy for this sandbox.
	Network *egresspolicy.Spec `json:"network,omitempty"`
	// Credentials names the account's credential routes the sandbox may
	// use (SBX_CREDENTIAL_<NAME>_URL inside it).
	Credentials    []string `json:"credentials,omitempty"`
	IdempotencyKey string   `json:"-"`
	// Actor names who asked, for events ("account:<id>" by default).
	Actor string `json:"-"`
	// Caller is the credential that asked (the agent token's ID), for the
	// grant audit; "account:<id>" when unset.
	Caller string `json:"-"`
	// recreate is the sandbox a recreate replaces: it ends in the
	// create's transaction (see Recreate).
	recreate *store.Sandbox
}

// stored is the request as a recreate reads it back: no token, only
// whether there was one (repo_auth).
func (r CreateRequest) stored() []byte {
	auth := r.Repo != nil && r.Repo.Token != ""
	r.Repo = r.Repo.withoutToken()
	b, _ := json.Marshal(struct {
		CreateRequest
		RepoAuth bool `json:"repo_auth,omitempty"`
	}{r, auth})
	return b
}

// hash identifies the request body for idempotent replays. The token is
// left out: the hash is stored.
func (r CreateRequest) hash() string {
	r.Repo = r.Repo.withoutToken()
	b, _ := json.Marshal(r)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

var idempotencyKeyRE = regexp.MustCompile(`^[\x21-\x7e]{1,255}$`)

// Create admits a new sandbox in pending and enqueues its provisioning.
// With an idempotency key seen before and the same request, it returns the
// existing sandbox and replayed=true. Nothing is created unless every
// input is valid and Admit lets the account have one more sandbox.
func (m *Manager) Create(ctx context.Context, acct store.Account, req CreateRequest) (sb store.Sandbox, replayed bool, err error) {
	if req.IdempotencyKey != "" && !idempotencyKeyRE.MatchString(req.IdempotencyKey) {
		return sb, false, invalid("Idempotency-Key", "must be 1 to 255 printable ASCII characters")
	}
	var fork store.Snapshot
	if req.FromSnapshot != "" {
		if fork, err = m.usableSnapshot(ctx, acct, req.FromSnapshot, "from_snapshot"); err != nil {
			return sb, false, err
		}
		if req.Profile == "" {
			req.Profile = fork.Profile
		}
	}
	if req.Profile == "" {
		req.Profile = m.cfg.DefaultProfile
	}
	if req.Profile == "" {
		return sb, false, invalid("profile", "is required (this deployment has no default profile)")
	}
	deadline := m.cfg.DefaultDeadline
	if req.DeadlineMinutes != nil {
		if err := m.checkMinutes("deadline_minutes", *req.DeadlineMinutes); err != nil {
			return sb, false, err
		}
		deadline = time.Duration(*req.DeadlineMinutes) * time.Minute
	}
	if req.ProjectID != "" && !validProjectID(req.ProjectID) {
		return sb, false, invalid("project_id", "must be a UUID")
	}
	consumer, err := validateConsumer(req.Consumer)
	if err != nil {
		return sb, false, err
	}
	grants, err := m.validateGrants(ctx, acct.ID, req.Grants)
	if err != nil {
		return sb, false, err
	}
	if err := validateServices(req.Services); err != nil {
		return sb, false, err
	}
	repo, err := validateRepo(req.Repo)
	if err != nil {
		return sb, false, err
	}
	if err := validateName(req.Name); err != nil {
		return sb, false, err
	}
	if err := validateLabels(req.Labels); err != nil {
		return sb, false, err
	}
	if err := validateEnv(req.Env); err != nil {
		return sb, false, err
	}
	if err := m.validateSecretRefs(ctx, acct.ID, req.Secrets, req.Env); err != nil {
		return sb, false, err
	}
	idle, retention, err := m.validateIdle(ctx, acct.ID, req.IdleTimeoutMinutes, req.RetentionDays)
	if err != nil {
		return sb, false, err
	}
	profile, err := m.store.Profile(ctx, req.Profile)
	if errors.Is(err, store.ErrNotFound) {
		return sb, false, m.unknownProfile(ctx, req.Profile)
	}
	if err != nil {
		return sb, false, fmt.Errorf("look up profile %q: %w", req.Profile, err)
	}
	// A platform the account may not use is refused by its own rule
	// (Admit's 403); whether this deployment has such hosts is not
	// something that account is told.
	if len(acct.AllowedPlatforms) == 0 || contains(acct.AllowedPlatforms, profile.Platform) {
		if err := m.admitProfile(profile); err != nil {
			return sb, false, err
		}
	}
	if req.FromSnapshot != "" && profile.Platform != fork.Platform {
		return sb, false, invalid("from_snapshot", "snapshot %s is of a %s sandbox; profile %s is %s", fork.ID, fork.Platform, profile.Name, profile.Platform)
	}
	network, err := m.narrowNetwork(profile.Name, req.Network)
	if err != nil {
		return sb, false, err
	}
	if err := m.validateCredentialNames(ctx, acct.ID, req.Credentials); err != nil {
		return sb, false, err
	}

	reqHash := req.hash()
	if req.IdempotencyKey != "" {
		if prev, ok, err := m.replay(ctx, acct.ID, req.IdempotencyKey, reqHash); ok || err != nil {
			return prev, ok, err
		}
	}

	// Microseconds are what both stores keep: the response then matches
	// what a later GET (or grant introspection) reads back.
	now := m.now().UTC().Truncate(time.Microsecond)
	sb = store.Sandbox{
		ID:              NewID(),
		AccountID:       acct.ID,
		ProjectID:       req.ProjectID,
		Profile:         profile.Name,
		Platform:        profile.Platform,
		State:           store.StatePending,
		CreatedAt:       now,
		DeadlineAt:      now.Add(deadline),
		Grants:          grants,
		Consumer:        consumer,
		IdempotencyKey:  req.IdempotencyKey,
		RequestHash:     reqHash,
		Name:            req.Name,
		Labels:          req.Labels,
		NoWakeOnTraffic: req.WakeOnTraffic != nil && !*req.WakeOnTraffic,
		FromSnapshot:    req.FromSnapshot,
		CreateRequest:   req.stored(),
		Env:             req.Env,
		Secrets:         req.Secrets,
		IdleTimeout:     idle,
		IgnoreBusy:      req.KeepAwakeWhileBusy != nil && !*req.KeepAwakeWhileBusy,
		RetentionDays:   retention,
		Network:         network,
		Credentials:     req.Credentials,
	}
	if req.recreate != nil {
		sb.RecreatedFrom = req.recreate.ID
	}
	actor := req.Actor
	if actor == "" {
		actor = "account:" + acct.ID
	}
	caller := req.Caller
	if caller == "" {
		caller = "account:" + acct.ID
	}
	job := ProvisionArgs{SandboxID: sb.ID, Repo: repo}
	var jobOpts *river.InsertOpts
	if repo != nil && repo.Auth {
		// Held before the job can run (at commit), let go of unless
		// the create commits; the job runs in this process only.
		m.tokens.put(sb.ID, req.Repo.Token, now, now.Add(m.cfg.ProvisionTimeout+time.Minute))
		jobOpts = &river.InsertOpts{Queue: m.queue}
	}
	err = m.store.InTx(ctx, func(tx store.Tx) error {
		if req.recreate != nil {
			// Ended first: its pod no longer counts against the limit,
			// and its name is free for the successor.
			if err := m.endRecreated(ctx, tx, req.recreate.ID, sb.ID, actor, now); err != nil {
				return err
			}
		}
		if err := tx.InsertSandbox(ctx, sb); err != nil {
			return err
		}
		if err := recordGrants(ctx, tx, sb, caller, now); err != nil {
			return err
		}
		for _, sv := range req.Services {
			if _, err := tx.PutService(ctx, serviceRow(sb.ID, sv, now)); err != nil {
				return err
			}
		}
		if err := tx.InsertEvent(ctx, stateEvent(sb, "", actor, now)); err != nil {
			return err
		}
		if err := tx.Enqueue(ctx, job, jobOpts); err != nil {
			return err
		}
		// Last: the account lock it takes is held until commit.
		return m.admitInserted(ctx, tx, acct.ID, profile.Platform)
	})
	if err != nil {
		m.tokens.drop(sb.ID)
	}
	if errors.Is(err, store.ErrConflict) && req.IdempotencyKey != "" {
		// A concurrent request with the same key won the insert.
		prev, ok, rerr := m.replay(ctx, acct.ID, req.IdempotencyKey, reqHash)
		if ok || rerr != nil {
			return prev, ok, rerr
		}
	}
	if errors.Is(err, store.ErrConflict) && req.Name != "" {
		return store.Sandbox{}, false, &NameTakenError{Name: req.Name}
	}
	if err != nil {
		return store.Sandbox{}, false, fmt.Errorf("create sandbox: %w", err)
	}
	if req.recreate != nil {
		m.publish(ctx, req.recreate.ID)
	}
	m.metrics.created.WithLabelValues(sb.Platform).Inc()
	m.log.InfoContext(ctx, "sandbox created", "sandbox_id", sb.ID, "account_id", acct.ID, "profile", sb.Profile, "grants", len(grants))
	return sb, false, nil
}

func (m *Manager) replay(ctx context.Context, accountID, key, reqHash string) (store.Sandbox, bool, error) {
	prev, err := m.store.SandboxByIdempotencyKey(ctx, accountID, key)
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, false, nil
	}
	if err != nil {
		return store.Sandbox{}, false, fmt.Errorf("look up idempotency key: %w", err)
	}
	if prev.RequestHash != reqHash {
		return store.Sandbox{}, false, ErrIdempotencyReuse
	}
	return prev, true, nil
}

// Get returns the account's sandbox; another account's is ErrNotFound.
func (m *Manager) Get(ctx context.Context, acct store.Account, id string) (store.Sandbox, error) {
	sb, err := m.store.Sandbox(ctx, id)
	if errors.Is(err, store.ErrNotFound) || (err == nil && sb.AccountID != acct.ID) {
		return store.Sandbox{}, ErrNotFound
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// Delete ends a sandbox. Deleting one that already ended returns it as is.
func (m *Manager) Delete(ctx context.Context, acct store.Account, idOrName string) (store.Sandbox, error) {
	sb, err := m.Resolve(ctx, acct, idOrName)
	if err != nil {
		return store.Sandbox{}, err
	}
	return m.end(ctx, sb.ID, ReasonExplicitDelete, "account:"+acct.ID)
}

// checkMinutes bounds a client's minute count before any arithmetic on
// it: time.Duration overflows past about 153 million minutes, and an
// overflowed deadline lands in the past, where the reaper ends the sandbox.
func (m *Manager) checkMinutes(field string, n int) error {
	if most := int(m.cfg.MaxLifetime / time.Minute); n < 1 || n > most {
		return invalid(field, "must be between 1 and %d (the %s lifetime cap)", most, m.cfg.MaxLifetime)
	}
	return nil
}

// End reasons recorded on sessions and sandboxes.
const (
	ReasonExplicitDelete  = "explicit_delete"
	ReasonDeadline        = "deadline"
	ReasonProvisionFailed = "provision_failed"
	ReasonPodVanished     = "node_loss"
)

// end moves a live sandbox to terminating, closing whatever billing line is
// open with reason, and enqueues the teardown. It is idempotent.
func (m *Manager) end(ctx context.Context, id, reason, actor string) (store.Sandbox, error) {
	return m.endAt(ctx, id, reason, actor, time.Time{}, nil)
}

// endAt is end with the billing lines closed at `at` (zero: now) and, when
// only is non-nil, only for sandboxes in a state it accepts; the check and
// the close run under the sandbox's row lock, so callers racing on several
// replicas close a session once.
func (m *Manager) endAt(ctx context.Context, id, reason, actor string, at time.Time, only func(store.Sandbox) bool) (store.Sandbox, error) {
	// The teardown this enqueues waits until publish below told the
	// edges (see endings).
	told := m.ending.begin(id)
	defer told()
	var out store.Sandbox
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		out = sb
		if AdmissionOf(sb) == Ended || (only != nil && !only(sb)) {
			return nil
		}
		now := m.now().UTC()
		closeAt := now
		if !at.IsZero() {
			closeAt = at.UTC()
		}
		out, err = endLocked(ctx, tx, sb, reason, actor, closeAt, now)
		return err
	})
	if errors.Is(err, store.ErrNotFound) {
		return store.Sandbox{}, ErrNotFound
	}
	if err != nil {
		return store.Sandbox{}, fmt.Errorf("end sandbox %s (%s): %w", id, reason, err)
	}
	m.publish(ctx, id) // waiters for a wake learn it will not come
	return out, nil
}

// endLocked moves sb, locked in tx and live, to terminating: whichever
// line is open closes at closeAt with reason, and the teardown is
// enqueued.
func endLocked(ctx context.Context, tx store.Tx, sb store.Sandbox, reason, actor string, closeAt, now time.Time) (store.Sandbox, error) {
	if sb.ReadyAt != nil && closeAt.Before(*sb.ReadyAt) {
		closeAt = *sb.ReadyAt // a skewed node clock must not make a negative interval
	}
	// Close both lines: at most one is open, and closing a line that
	// is not open is a no-op.
	if _, err := tx.CloseSessions(ctx, sb.ID, store.SessionCompute, closeAt, reason); err != nil {
		return sb, err
	}
	if _, err := tx.CloseSessions(ctx, sb.ID, store.SessionStorage, closeAt, reason); err != nil {
		return sb, err
	}
	sb.State = store.StateTerminating
	sb.EndReason = reason
	clearLease(&sb) // a restore in flight finds the sandbox ended
	if err := tx.UpdateSandbox(ctx, sb); err != nil {
		return sb, err
	}
	if err := tx.InsertEvent(ctx, stateEvent(sb, reason, actor, now)); err != nil {
		return sb, err
	}
	return sb, tx.Enqueue(ctx, TerminateArgs{SandboxID: sb.ID}, nil)
}

func stateEvent(sb store.Sandbox, reason, actor string, at time.Time) store.Event {
	return store.Event{
		SandboxID: sb.ID, AccountID: sb.AccountID, Type: "state", State: sb.State,
		Reason: reason, Actor: actor, At: at,
	}
}

var idEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// NewID returns a sandbox ID: "sbx-" and 26 lowercase base32 characters.
// It is safe as an SSH username and a DNS label.
func NewID() string { return newPrefixedID("sbx-") }

func newPrefixedID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + idEncoding.EncodeToString(b[:])
}

// ValidID reports whether s has the shape of a sandbox ID.
func ValidID(s string) bool {
	rest, ok := strings.CutPrefix(s, "sbx-")
	if !ok || len(rest) != 26 {
		return false
	}
	_, err := idEncoding.DecodeString(rest)
	return err == nil
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func validProjectID(s string) bool { return uuidRE.MatchString(s) }

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// unknownProfile is the refusal of a profile that does not exist, naming
// those that do. A failure to list them still refuses, without the list:
// the request is wrong either way.
func (m *Manager) unknownProfile(ctx context.Context, name string) error {
	e := &UnknownProfileError{Name: name}
	profiles, err := m.store.Profiles(ctx)
	if err != nil {
		m.log.WarnContext(ctx, "list profiles for an unknown profile's refusal", "err", err)
		return e
	}
	for _, p := range profiles {
		e.Known = append(e.Known, p.Name)
	}
	slices.Sort(e.Known)
	return e
}
