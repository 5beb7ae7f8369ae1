// Package edgeapi is the contract of control's internal API, the one the
// edge calls: paths, request and response bodies, and the problem codes
// refusals carry. The server (control/internalapi) and the client
// (edge/controlclient) both import it, so the two sides cannot drift.
//
// Adding an endpoint: a path constant, its request and response types and
// any problem codes here; a handler in control/internalapi; a method in
// edge/controlclient. Bodies are JSON; errors are RFC 9457 problem
// documents whose `code` is one of the Code* constants.
package edgeapi

import "time"

// Prefix is where the internal API is mounted. It is served only on
// control's internal listener, never on the public one.
const Prefix = "/internal/v1"

// Paths, relative to the server's base URL.
const (
	// PathHealth answers 200 to an authenticated caller; the edge checks it
	// at start so a wrong URL or secret fails loudly and early.
	PathHealth = Prefix + "/healthz"
	// PathSSHAuthorize: POST SSHAuthorizeRequest → 200 SSHAuthorizeResponse,
	// or a problem with one of the CodeSSH* codes.
	PathSSHAuthorize = Prefix + "/ssh/authorize"
	// PathWake: POST WakeRequest → 200 WakeResponse once the sandbox is
	// ready (restored if it was suspended), or a problem with one of the
	// CodeWake* codes. The server holds the request while the sandbox
	// wakes, up to its own limit or until the caller gives up.
	PathWake = Prefix + "/sandboxes/wake"
)

// WakeRequest asks control to make a sandbox ready. The edge sends it only
// for a caller it authenticated for that sandbox.
type WakeRequest struct {
	SandboxID string `json:"sandbox_id"`
}

// WakeResponse says the sandbox is ready.
type WakeResponse struct {
	Ready bool `json:"ready"`
}

// SSHAuthorizeRequest asks whether a public key may reach the sandbox its
// SSH username names.
type SSHAuthorizeRequest struct {
	Username string `json:"username"`
	// Fingerprint is the key's SHA256 fingerprint ("SHA256:...") as
	// x/crypto/ssh's FingerprintSHA256 prints it.
	Fingerprint string `json:"fingerprint"`
}

// SSHAuthorizeResponse is where an accepted credential leads.
type SSHAuthorizeResponse struct {
	SandboxID string `json:"sandbox_id"`
	// Addr is the sandbox sshd's host:port.
	Addr string `json:"addr"`
	// User is the login on the sandbox, the upstream certificate principal.
	User string `json:"user"`
	// HostKey is the sandbox's pinned host key, authorized_keys form.
	HostKey string `json:"host_key"`
	// ExpiresAt is when the credential stops admitting new connections.
	ExpiresAt time.Time `json:"expires_at"`
}

// Problem codes. Refusals are answers, not faults: the client maps each to
// its own sentinel error and may cache it.
const (
	CodeUnauthorized   = "unauthorized"
	CodeInvalidRequest = "invalid_request"
	CodeRouteNotFound  = "route_not_found"
	CodeInternal       = "internal"
	// CodeUnavailable: control's database is away for the moment; the
	// same call may succeed shortly. A fault, never cached.
	CodeUnavailable = "unavailable"

	CodeSSHUnknownKey     = "ssh_unknown_key"
	CodeSSHExpired        = "ssh_expired"
	CodeSSHSandboxEnded   = "ssh_sandbox_ended"
	CodeSSHWrongSandbox   = "ssh_wrong_sandbox"
	CodeSSHUnknownSandbox = "ssh_unknown_sandbox"
	// CodeSSHNotReady: the credential is good but the sandbox has no
	// running server (pending, suspended, restoring). Never cached long.
	CodeSSHNotReady = "ssh_not_ready"

	// CodeWakeUnknownSandbox: no such sandbox.
	CodeWakeUnknownSandbox = "wake_unknown_sandbox"
	// CodeWakeEnded: the sandbox ended or failed; it will not wake.
	CodeWakeEnded = "wake_sandbox_ended"
	// CodeWakeLimit: the account's rules refuse it (concurrency limit).
	CodeWakeLimit = "wake_refused"
	// CodeWakeTimeout: still waking when the server's limit passed.
	CodeWakeTimeout = "wake_timeout"
)
