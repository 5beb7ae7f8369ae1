package controlclient

import (
	"context"
	"net/http"

	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

var _ sshbroker.Authorizer = (*Client)(nil)

// Authorize asks control whether the key with fingerprint may reach the
// sandbox username names. It implements sshbroker.Authorizer; the broker
// caches its answers. Refusals wrap the broker's sentinels (*Error
// unwraps to them).
func (c *Client) Authorize(ctx context.Context, username, fingerprint string) (sshbroker.Route, error) {
	var out edgeapi.SSHAuthorizeResponse
	err := c.Do(ctx, http.MethodPost, edgeapi.PathSSHAuthorize,
		edgeapi.SSHAuthorizeRequest{Username: username, Fingerprint: fingerprint}, &out)
	if err != nil {
		return sshbroker.Route{}, err
	}
	return sshbroker.Route{
		SandboxID: out.SandboxID, Addr: out.Addr, User: out.User, HostKey: out.HostKey, ExpiresAt: out.ExpiresAt,
	}, nil
}
