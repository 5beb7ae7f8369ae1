package edgeapi

import (
	"net/http"

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
