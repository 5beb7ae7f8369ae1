package controlclient

import (
	"context"
	"fmt"
	"net/http"

	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

var _ sshbroker.Authorizer = (*Client)(nil)

// sshRefusals maps control's refusal codes to the broker's sentinels.
var sshRefusals = map[string]error{
	edgeapi.CodeSSHUnknownKey:     sshbroker.ErrUnknownKey,
	edgeapi.CodeSSHExpired:        sshbroker.ErrExpired,
	edgeapi.CodeSSHSandboxEnded:   sshbroker.ErrSandboxEnded,
	edgeapi.CodeSSHWrongSandbox:   sshbroker.ErrWrongSandbox,
	edgeapi.CodeSSHUnknownSandbox: sshbroker.ErrUnknownSandbox,
	edgeapi.CodeSSHNotReady:       sshbroker.ErrNotReady,
}

// Authorize asks control whether the key with fingerprint may reach the
// sandbox username names. It implements sshbroker.Authorizer; the broker
// caches its answers.
func (c *Client) Authorize(ctx context.Context, username, fingerprint string) (sshbroker.Route, error) {
	var out edgeapi.SSHAuthorizeResponse
	err := c.Do(ctx, http.MethodPost, edgeapi.PathSSHAuthorize,
		edgeapi.SSHAuthorizeRequest{Username: username, Fingerprint: fingerprint}, &out)
	if err != nil {
		if s, ok := sshRefusals[Code(err)]; ok {
			return sshbroker.Route{}, fmt.Errorf("%w (%w)", s, err)
		}
		return sshbroker.Route{}, err
	}
	return sshbroker.Route{
		SandboxID: out.SandboxID, Addr: out.Addr, User: out.User, HostKey: out.HostKey, ExpiresAt: out.ExpiresAt,
	}, nil
}
