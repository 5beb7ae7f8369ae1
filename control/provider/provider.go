// Package provider defines how control turns a profile into a running
// sandbox and back. Implementations: provider/local (development and tests)
// and provider/k8s (production).
package provider

import (
	"context"
	"errors"
	"time"

	"github.com/sbxedge/sbx/internal/initproto"
)

// ErrNotFound is returned by Status for a sandbox the provider does not know.
var ErrNotFound = errors.New("sandbox not found in provider")

// Spec is everything a provider needs to start a sandbox. It carries
// secrets (the host key); providers must not log it.
type Spec struct {
	SandboxID string
	AccountID string
	Profile   string
	Platform  string
	CPU       float64
	MemoryMB  int
	DiskGB    int
	Image     string

	// HostKeyPEM is the sandbox's private host key (OpenSSH PEM), generated
	// by control so it can pin the public half.
	HostKeyPEM []byte
	// UserCAKey is the internal CA's public key in authorized_keys form;
	// the sandbox's sshd trusts certificates it signed.
	UserCAKey string
	// Files are written into the workspace (or home) before the sandbox
	// reports ready, e.g. grant tokens. Paths are relative to the home dir.
	Files []File
	// Env are NAME=value pairs set in every process of the sandbox (exec,
	// SSH sessions, terminals, services), such as the egress proxy. They
	// may carry a secret (the proxy credential); providers must not log
	// them. Values hold no spaces or quotes.
	Env []string
	// FromSnapshot, when set, names a snapshot (see Snapshotter) the
	// workspace starts as: Provision makes a fork from it, and Restore
	// replaces the workspace of a sandbox, running or not, with it (an
	// in-place restore).
	FromSnapshot string
	// Egress is the mode of the sandbox's network policy (open,
	// allowlist, none) when it was provisioned; a provider that can
	// enforce it below the proxy does (Kubernetes: the pod's
	// sbx.dev/egress label, which deploy/'s NetworkPolicy reads).
	Egress string
	// Services are the sandbox's declared services, for its init to start
	// with the sandbox rather than wait for control's push (a wake's app
	// starts one SSH round trip sooner). A provider that started them
	// says so (Endpoint.ServicesStarted), and control then skips its push
	// (initproto Sync) unless the declaration changed meanwhile; one that
	// cannot hand them over ignores them, and control pushes the set once
	// the sandbox is up. Empty while something must happen first (a
	// repo's clone).
	Services []initproto.Service
}

// File is a file placed inside the sandbox at provisioning.
type File struct {
	Path string
	Mode uint32
	Data []byte
}

// Endpoint tells control and edge how to reach a sandbox's sshd.
type Endpoint struct {
	// Addr is host:port, reachable only from control and edge.
	Addr string
	// ForwardAddr is host:port of the sandbox's port forwarder (package
	// podtcp), reachable only from the edge; empty when it has none.
	ForwardAddr string
	// User is the login name certificates must carry as principal.
	User string
	// Workspace is the absolute path of the workspace inside the sandbox.
	Workspace string
	// Boot says how Provision got the pod: "warm_hit" (claimed from a warm
	// pool) or "cold_boot". Empty means cold_boot. Not persisted.
	Boot string
	// ServicesStarted says that this Provision or Restore started the
	// sandbox's init with exactly Spec.Services in it (started, or
	// starting), so control need not push them (initproto Sync) before
	// it marks the sandbox ready. False when the call found the sandbox
	// already running (its services are the earlier spec's), when the
	// init could not take them, from Status and List, and from a provider
	// that does not hand Services over. Not persisted.
	ServicesStarted bool
}

// Phase is what a provider observes about a sandbox's pod.
type Phase string

const (
	PhaseRunning  Phase = "running"
	PhaseStopped  Phase = "stopped" // suspended: workspace kept, no server
	PhaseFailed   Phase = "failed"
	PhaseNotFound Phase = "not_found"
)

// Instance is one sandbox as the provider sees it.
type Instance struct {
	SandboxID string
	Phase     Phase
	Endpoint  Endpoint
	// Reason explains a failed phase (oom_killed, node_loss, ...).
	Reason string
}

// Provider is implemented by each backend. All methods are idempotent:
// control retries them from durable jobs after crashes.
type Provider interface {
	// Provision starts the sandbox (or finds it already started) and
	// returns its endpoint once its sshd accepts connections.
	Provision(ctx context.Context, spec Spec) (Endpoint, error)
	// Destroy stops the sandbox and deletes its workspace. Destroying an
	// unknown sandbox succeeds.
	Destroy(ctx context.Context, sandboxID string) error
	// Status reports one sandbox.
	Status(ctx context.Context, sandboxID string) (Instance, error)
	// List reports every sandbox the provider holds, for reconciliation.
	List(ctx context.Context) ([]Instance, error)
}

// ErrSuspendUnsupported is returned by Suspend for sandboxes whose
// platform cannot be offloaded (macOS in v1: such a sandbox stays ready).
var ErrSuspendUnsupported = errors.New("suspend is not supported for this platform")

// ErrSnapshotGone is returned (wrapped) by Restore when the sandbox's
// snapshot no longer exists (expired or deleted): retrying cannot help,
// and lifecycle fails the sandbox with snapshot_expired.
var ErrSnapshotGone = errors.New("snapshot no longer exists")

// PlatformSuspender is implemented by Suspenders that can offload only
// some platforms (the k8s provider: Linux, not macOS in v1). Idle offload
// leaves sandboxes of other platforms ready instead of trying and failing.
type PlatformSuspender interface {
	CanSuspend(platform string) bool
}

// Stop is a sandbox's pod ending on its own: a terminal phase observed by
// the provider, with the reason read from the pod (oom_killed, node_loss,
// evicted, guest_crash, error) and when it ended.
type Stop struct {
	SandboxID string
	Reason    string
	At        time.Time
}

// StopWatcher is implemented by providers that observe pods ending on
// their own. Lifecycle closes the billing session for each Stop; several
// control replicas may report the same Stop, so handling must be
// idempotent.
type StopWatcher interface {
	// OnStop registers fn; it is called from the provider's watcher
	// goroutine for every sandbox pod that reaches a terminal phase (again
	// after a restart of the watcher, so fn must be idempotent).
	OnStop(fn func(Stop))
}

// Suspender is implemented by providers that can offload an idle sandbox:
// snapshot its workspace, release its compute, and bring it back later.
type Suspender interface {
	Suspend(ctx context.Context, sandboxID string) error
	Restore(ctx context.Context, spec Spec) (Endpoint, error)
}

// Snapshotter is implemented by providers that take point-in-time copies
// of a running sandbox's workspace. A snapshot is the account's, not the
// sandbox's: it outlives the sandbox, and Destroy leaves it. Both methods
// are idempotent.
type Snapshotter interface {
	// Snapshot copies sandboxID's workspace as snapshotID while the
	// sandbox keeps running, and returns once the copy is complete.
	Snapshot(ctx context.Context, sandboxID, snapshotID string) error
	// DeleteSnapshot removes snapshotID; an unknown one succeeds.
	DeleteSnapshot(ctx context.Context, snapshotID string) error
}

// Progress is a report from a provision that is waiting, such as for a
// macOS slot: lifecycle records it as an event of the sandbox.
type Progress struct {
	SandboxID string
	Reason    string // e.g. "waiting_for_slot"
	Message   string
}

// ProgressReporter is implemented by providers whose Provision may wait
// (the tart provider, for a licence slot). fn is called from Provision's
// goroutine; it must not block for long.
type ProgressReporter interface {
	OnProgress(fn func(Progress))
}

// Shape is what a profile asks of one sandbox.
type Shape struct {
	Platform string
	CPU      float64
	MemoryMB int
}

// Fitter is implemented by providers that can tell at create that a shape
// will never run (no host large enough): control refuses the create (422)
// instead of leaving it pending until the provisioning timeout.
type Fitter interface {
	Fits(s Shape) error
}

// PlatformServer is implemented by providers that run only some
// platforms (sbx dev: Linux always, macOS only with a tart host). Control
// offers and accepts only the profiles of platforms it serves.
type PlatformServer interface {
	Serves(platform string) bool
}
