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
