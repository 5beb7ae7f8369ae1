package controlclient

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/edge/sshbroker"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

var _ sshbroker.Waker = (*Client)(nil)

// wakeCallLimit bounds one wake call; the caller's context usually ends it
// sooner (the broker's WakeTimeout).
const wakeCallLimit = 2 * time.Minute

// Wake asks control to make the sandbox ready, restoring it if it is
// suspended, and returns once it is. It is idempotent: many edges waking
// one sandbox cause one restore.
func (c *Client) Wake(ctx context.Context, sandboxID string) error {
	var out edgeapi.WakeResponse
	if err := c.do(ctx, wakeCallLimit, http.MethodPost, edgeapi.PathWake, edgeapi.WakeRequest{SandboxID: sandboxID}, &out); err != nil {
		return fmt.Errorf("wake %s: %w", sandboxID, err)
	}
	if !out.Ready {
		return fmt.Errorf("wake %s: control answered without ready", sandboxID)
	}
	return nil
}
