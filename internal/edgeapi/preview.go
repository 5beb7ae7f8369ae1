package edgeapi

// Preview endpoints: the preview proxy's questions to control.
const (
	// PathPreviewRoute: POST PreviewRouteRequest → 200 PreviewRoute, or a
	// problem with CodePreviewUnknownHost.
	PathPreviewRoute = Prefix + "/preview/route"
	// PathPreviewToken: POST PreviewTokenRequest → 200
	// PreviewTokenResponse, or a problem with CodePreviewInvalidToken.
	PathPreviewToken = Prefix + "/preview/token"
	// PathPreviewMember: POST PreviewMemberRequest → 200
	// PreviewMemberResponse.
	PathPreviewMember = Prefix + "/preview/member"

	CodePreviewUnknownHost  = "preview_unknown_host"
	CodePreviewInvalidToken = "preview_invalid_token"
)

// PreviewRouteRequest names a preview host by its label.
type PreviewRouteRequest struct {
	Label string `json:"label"`
}

// PreviewRoute is where a preview host leads. Addr, User and HostKey are
// empty unless the sandbox has a running server.
type PreviewRoute struct {
	SandboxID  string `json:"sandbox_id"`
	AccountID  string `json:"account_id"`
	Port       int    `json:"port"`
	Access     string `json:"access"`      // private | public
	HostPolicy string `json:"host_policy"` // forward | localhost
	State      string `json:"state"`
	Addr       string `json:"addr,omitempty"`
	User       string `json:"user,omitempty"`
	HostKey    string `json:"host_key,omitempty"`
	Workspace  string `json:"workspace,omitempty"`
}

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
// publishes the label of every preview host whose port changed or was
// removed; each edge replica drops it from its route cache at once.
const PreviewInvalidateChannel = "sbx:preview:invalidate"
