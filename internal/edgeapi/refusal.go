package edgeapi

import "net/http"

// Refusal is an answer of the internal API that is not a fault: the reason
// control refuses, with the problem code and status it travels under. The
// reasons are declared here once; control's packages return them, the
// server turns them into problems, the client (edge/controlclient) turns
// problems back into them, and the edge's packages compare with errors.Is,
// so both sides of the seam name the same values.
type Refusal struct {
	Code   string
	Status int
	msg    string
}

func (r *Refusal) Error() string { return r.msg }

// SSH refusals. Only ErrSSHExpired and ErrSSHSandboxEnded are about the key
// holder's own credential and worth explaining; the others must look
// alike to a prober.
var (
	ErrSSHUnknownKey     = &Refusal{CodeSSHUnknownKey, http.StatusForbidden, "unknown credential"}
	ErrSSHExpired        = &Refusal{CodeSSHExpired, http.StatusForbidden, "credential expired"}
	ErrSSHSandboxEnded   = &Refusal{CodeSSHSandboxEnded, http.StatusForbidden, "sandbox ended"}
	ErrSSHWrongSandbox   = &Refusal{CodeSSHWrongSandbox, http.StatusForbidden, "credential belongs to another sandbox"}
	ErrSSHUnknownSandbox = &Refusal{CodeSSHUnknownSandbox, http.StatusForbidden, "unknown sandbox"}
	// ErrSSHNotReady: the credential is good but the sandbox has no
	// running server to relay to (pending, suspended, restoring).
	ErrSSHNotReady = &Refusal{CodeSSHNotReady, http.StatusConflict, "sandbox not ready"}
)

// SSHNotReadyError is ErrSSHNotReady naming the sandbox the username
// resolved to. The username may be the sandbox's name, and only control
// knows which sandbox that is, so the broker wakes the ID it is told and
// never the username. It travels as the ssh_not_ready problem's
// sandbox_id.
type SSHNotReadyError struct {
	SandboxID string
	State     string
}

func (e *SSHNotReadyError) Error() string {
	return "sandbox " + e.SandboxID + " is " + e.State + ": " + ErrSSHNotReady.Error()
}

// Unwrap lets errors.Is(err, ErrSSHNotReady) match.
func (e *SSHNotReadyError) Unwrap() error { return ErrSSHNotReady }

// Preview refusals.
var (
	// ErrPreviewUnknownHost: no exposed port has this label (never had,
	// was removed, or its sandbox ended).
	ErrPreviewUnknownHost = &Refusal{CodePreviewUnknownHost, http.StatusNotFound, "unknown preview host"}
	// ErrPreviewSandboxEnded: the label led to a sandbox that has ended,
	// which a person who had it open is told (410) rather than "no such
	// address". An edge that predates it answers it as a control fault.
	ErrPreviewSandboxEnded = &Refusal{CodePreviewSandboxEnded, http.StatusGone, "preview's sandbox ended"}
	// ErrPreviewInvalidToken: the token is malformed, unknown, revoked,
	// expired or not an account's agent token.
	ErrPreviewInvalidToken = &Refusal{CodePreviewInvalidToken, http.StatusForbidden, "invalid token"}
	// ErrPreviewShareUnknown: no share link has this secret (or ID), or
	// it opens another port than the host's.
	ErrPreviewShareUnknown = &Refusal{CodePreviewShareUnknown, http.StatusNotFound, "unknown share link"}
	// ErrPreviewShareRevoked and ErrPreviewShareExpired: the link was
	// good and is no more; its holder is told which.
	ErrPreviewShareRevoked = &Refusal{CodePreviewShareRevoked, http.StatusGone, "share link revoked"}
	ErrPreviewShareExpired = &Refusal{CodePreviewShareExpired, http.StatusGone, "share link expired"}
)

// Wake refusals the edge tells apart.
var (
	// ErrWakeSandboxEnded: the sandbox ended or failed; it will not wake.
	ErrWakeSandboxEnded = &Refusal{CodeWakeEnded, http.StatusConflict, "sandbox ended"}
)

var refusals = map[string]*Refusal{}

func init() {
	for _, r := range []*Refusal{
		ErrSSHUnknownKey, ErrSSHExpired, ErrSSHSandboxEnded, ErrSSHWrongSandbox, ErrSSHUnknownSandbox, ErrSSHNotReady,
		ErrPreviewUnknownHost, ErrPreviewSandboxEnded, ErrPreviewInvalidToken, ErrWakeSandboxEnded,
		ErrPreviewShareUnknown, ErrPreviewShareRevoked, ErrPreviewShareExpired, ErrEgressUnauthorized,
	} {
		refusals[r.Code] = r
	}
}

// RefusalOf returns the refusal a problem code names, or nil.
func RefusalOf(code string) *Refusal { return refusals[code] }
