package edgeapi

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Preview endpoints: the preview proxy's questions to control.
const (
	// PathPreviewRoute: POST PreviewRouteRequest → 200 PreviewRoute, or a
	// problem with CodePreviewUnknownHost or CodePreviewSandboxEnded.
	PathPreviewRoute = Prefix + "/preview/route"
	// PathPreviewToken: POST PreviewTokenRequest → 200
	// PreviewTokenResponse, or a problem with CodePreviewInvalidToken.
	PathPreviewToken = Prefix + "/preview/token"
	// PathPreviewMember: POST PreviewMemberRequest → 200
	// PreviewMemberResponse.
	PathPreviewMember = Prefix + "/preview/member"
	// PathPreviewShare: POST PreviewShareRequest → 200 PreviewShare, or a
	// problem with CodePreviewShareUnknown, CodePreviewShareRevoked or
	// CodePreviewShareExpired.
	PathPreviewShare = Prefix + "/preview/share"

	CodePreviewUnknownHost = "preview_unknown_host"
	// CodePreviewSandboxEnded: the label's sandbox ended (deleted, past
	// its deadline, or failed); its previews are gone for good.
	CodePreviewSandboxEnded = "preview_sandbox_ended"
	CodePreviewInvalidToken = "preview_invalid_token"
	CodePreviewShareUnknown = "preview_share_unknown"
	CodePreviewShareRevoked = "preview_share_revoked"
	CodePreviewShareExpired = "preview_share_expired"
)

// ShareParam is the query parameter of a share link's URL that carries
// its secret: control builds the URL with it, the edge exchanges it for
// a cookie and strips it.
const ShareParam = "sbx_share"

// PreviewShareRequest asks whether a share link opens the preview host
// Label: by its Secret on first use in a browser (the exchange for a
// cookie, audited once), by its ShareID afterwards.
type PreviewShareRequest struct {
	Label   string `json:"label"`
	Secret  string `json:"secret,omitempty"`
	ShareID string `json:"share_id,omitempty"`
}

// PreviewShare is a live share link.
type PreviewShare struct {
	ShareID   string    `json:"share_id"`
	SandboxID string    `json:"sandbox_id"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
}

// PreviewRouteRequest names a preview host by its label.
type PreviewRouteRequest struct {
	Label string `json:"label"`
}

// PreviewRoute is where a preview host leads. Addr, User and HostKey are
// empty unless the sandbox has a running server; ForwardAddr is empty
// then too, and when the sandbox has no forwarder (the edge takes the SSH
// road to the port).
type PreviewRoute struct {
	SandboxID string `json:"sandbox_id"`
	AccountID string `json:"account_id"`
	Port      int    `json:"port"`
	// PortLabel is the name the owner gave the port ("web"), for the
	// edge's pages; empty when none.
	PortLabel  string `json:"port_label,omitempty"`
	Access     string `json:"access"`      // private | public
	HostPolicy string `json:"host_policy"` // forward | localhost
	// State is the sandbox's lifecycle state. Edges decide on Admission;
	// State stays on the wire for edges older than it (a rollout upgrades
	// control and edges in any order).
	State string `json:"state"`
	// Admission is control's answer for a connection to the sandbox:
	// AdmissionReady, AdmissionStarting or AdmissionWakeable (an ended
	// sandbox is CodePreviewUnknownHost). Empty from a control older than
	// it; the edge then treats a route without Addr as wakeable.
	Admission Admission `json:"admission,omitempty"`
	Addr      string    `json:"addr,omitempty"`
	User      string    `json:"user,omitempty"`
	HostKey   string    `json:"host_key,omitempty"`
	Workspace string    `json:"workspace,omitempty"`
	// ForwardAddr is host:port of the sandbox's podtcp forwarder.
	ForwardAddr string `json:"forward_addr,omitempty"`
}

// Admission is control's answer to "may a connection to this sandbox
// proceed now, or must it wait", in the words of the seam rather than of
// control's state machine (control/lifecycle decides it; the edge acts
// on it).
type Admission string

const (
	// AdmissionReady: the sandbox has a running server; proceed.
	AdmissionReady Admission = "ready"
	// AdmissionStarting: the sandbox is being provisioned; wait for it.
	AdmissionStarting Admission = "starting"
	// AdmissionWakeable: the sandbox is asleep (or on its way in or
	// out); ask control to wake it, then wait.
	AdmissionWakeable Admission = "wakeable"
)

// PreviewTokenRequest carries an account token an API client presented to
// the proxy.
type PreviewTokenRequest struct {
	Token string `json:"token"`
}

// PreviewTokenResponse names the token's account.
type PreviewTokenResponse struct {
	AccountID string `json:"account_id"`
}

// PreviewMemberRequest asks whether a signed-in identity belongs to an
// account.
type PreviewMemberRequest struct {
	AccountID     string `json:"account_id"`
	Issuer        string `json:"issuer"`
	Subject       string `json:"subject"`
	Email         string `json:"email,omitempty"`
	EmailVerified bool   `json:"email_verified,omitempty"`
}

// PreviewMemberResponse is the answer.
type PreviewMemberResponse struct {
	Member bool `json:"member"`
}

// PreviewInvalidateChannel is the Redis pub/sub channel on which control
// publishes an Invalidation whenever preview authority changes: a port
// changed or was removed, a sandbox changed state, a token was revoked,
// or the members file was reloaded. Each edge replica drops what it
// cached and re-checks the open connections that rode on it.
const PreviewInvalidateChannel = "sbx:preview:invalidate"

// InvalidationKind names what changed.
type InvalidationKind string

const (
	// InvalidatePort: the port behind Label changed or was removed.
	InvalidatePort InvalidationKind = "port"
	// InvalidateSandbox: SandboxID changed state (ended, suspended, ...).
	InvalidateSandbox InvalidationKind = "sandbox"
	// InvalidateToken: a token of AccountID was revoked (every account's
	// tokens when AccountID is empty). Tokens are named by account, not
	// by ID: the edge knows only the secrets it was shown.
	InvalidateToken InvalidationKind = "token"
	// InvalidateMembers: the members file changed; memberships of
	// AccountID (of every account when empty) may be gone.
	InvalidateMembers InvalidationKind = "members"
	// InvalidateShare: the share link ShareID was revoked.
	InvalidateShare InvalidationKind = "share"
	// InvalidateAll: anything may have changed. Never published: a
	// subscriber makes it when it re-subscribes after a disconnect,
	// during which invalidations may have been missed. Every receiver
	// drops what it cached and re-checks every open connection.
	InvalidateAll InvalidationKind = "all"
)

// Invalidation is one message on PreviewInvalidateChannel, JSON encoded.
// It names what changed, never a credential.
type Invalidation struct {
	Kind      InvalidationKind `json:"kind"`
	Label     string           `json:"label,omitempty"`
	SandboxID string           `json:"sandbox_id,omitempty"`
	AccountID string           `json:"account_id,omitempty"`
	ShareID   string           `json:"share_id,omitempty"`
}

// Payload is the message published for i.
func (i Invalidation) Payload() string {
	b, _ := json.Marshal(i) // strings only: cannot fail
	return string(b)
}

// ParseInvalidation reads a message. A payload that is not a JSON object
// is a bare label, which is what control published before invalidations
// had kinds: edges and control may be upgraded in any order.
func ParseInvalidation(payload string) (Invalidation, error) {
	if !strings.HasPrefix(payload, "{") {
		return Invalidation{Kind: InvalidatePort, Label: payload}, nil
	}
	var i Invalidation
	if err := json.Unmarshal([]byte(payload), &i); err != nil {
		return Invalidation{}, fmt.Errorf("parse preview invalidation: %w", err)
	}
	return i, nil
}
