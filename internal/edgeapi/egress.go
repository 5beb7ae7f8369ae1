package edgeapi

import (
	"net/http"
	"time"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

// PathEgressAuthorize: POST EgressAuthorizeRequest → 200
// EgressAuthorizeResponse, or a problem with CodeEgressUnauthorized.
const PathEgressAuthorize = Prefix + "/egress/authorize"

// EgressAuthorizeRequest carries the proxy credential a sandbox presented
// to the egress gateway.
type EgressAuthorizeRequest struct {
	SandboxID string `json:"sandbox_id"`
	Secret    string `json:"secret"`
}

// EgressAuthorizeResponse is the policy the sandbox's egress follows now.
type EgressAuthorizeResponse struct {
	Network egresspolicy.Spec `json:"network"`
}

// CodeEgressUnauthorized: the proxy credential is not the sandbox's, or
// the sandbox is not live. One code for every cause, so the gateway
// cannot be used to probe for sandboxes.
const CodeEgressUnauthorized = "egress_unauthorized"

// ErrEgressUnauthorized is CodeEgressUnauthorized's refusal.
var ErrEgressUnauthorized = &Refusal{CodeEgressUnauthorized, http.StatusForbidden, "proxy credential not valid"}

// PathEgressLog: POST EgressLogRequest → 200 EgressLogResponse. The
// egress gateway ships its decisions to control in batches; control
// keeps each sandbox's log and turns refusals into the sandbox's events.
const PathEgressLog = Prefix + "/egress/log"

// MaxEgressBatch bounds one EgressLogRequest (control reads at most
// 64 KiB of body).
const MaxEgressBatch = 100

// EgressDecision is one decision of the gateway.
type EgressDecision struct {
	Time      time.Time `json:"time"`
	SandboxID string    `json:"sandbox_id"`
	Host      string    `json:"host"`
	Port      uint16    `json:"port"`
	Addr      string    `json:"addr,omitempty"`
	Verdict   string    `json:"verdict"`
	Reason    string    `json:"reason,omitempty"`
	BytesUp   int64     `json:"bytes_up"`
	BytesDown int64     `json:"bytes_down"`
}

// EgressLogRequest is a batch of decisions, oldest first.
type EgressLogRequest struct {
	Decisions []EgressDecision `json:"decisions"`
}

// EgressLogResponse says how many decisions were kept (those of unknown
// sandboxes are dropped).
type EgressLogResponse struct {
	Kept int `json:"kept"`
}

// PathEgressCredential: POST EgressCredentialRequest → 200
// EgressCredentialResponse, or a problem with CodeEgressUnauthorized
// (the proxy credential is not valid, or the sandbox may not use the
// route now). The answer carries a secret: it is used for one request
// and never kept or logged by the edge.
const PathEgressCredential = Prefix + "/egress/credential"

// EgressCredentialRequest asks for a sandbox's credential route.
type EgressCredentialRequest struct {
	SandboxID string `json:"sandbox_id"`
	Secret    string `json:"secret"` // the sandbox's proxy credential
	Name      string `json:"name"`
}

// EgressCredentialResponse is where to forward and what to add.
type EgressCredentialResponse struct {
	Upstream string `json:"upstream"`
	Header   string `json:"header"`
	Value    string `json:"value"`
}

// CredentialPathPrefix starts a credential route, a plain-HTTP URL on
// the egress gateway itself (not a proxied request):
// /_sbx/credentials/<sandbox ID>/<proxy credential>/<name>/<upstream path>.
// The sandbox's proxy credential is in the path so that any client that
// takes a base URL works, and so that only that sandbox opens it.
const CredentialPathPrefix = "/_sbx/credentials/"
