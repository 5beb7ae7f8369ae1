package internalapi

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

// Waker is what the wake endpoint needs; lifecycle.Manager and
// control.Service satisfy it.
type Waker interface {
	Wake(ctx context.Context, sandboxID string) error
}

// wakeLimit bounds how long one wake request is held, whatever the edge
// asks: a restore that takes longer is reported and retried by the edge.
const wakeLimit = 2 * time.Minute

var errWakeTimeout = problem.New(http.StatusServiceUnavailable, edgeapi.CodeWakeTimeout, "the sandbox is still waking")

// wake holds the request until the sandbox is ready. Many edges waking the
// same sandbox cause one restore (lifecycle guarantees it).
func (s *Server) wake(ctx context.Context, req edgeapi.WakeRequest) (edgeapi.WakeResponse, error) {
	if req.SandboxID == "" {
		return edgeapi.WakeResponse{}, badRequest("sandbox_id is required")
	}
	wctx, cancel := context.WithTimeout(ctx, wakeLimit)
	defer cancel()
	if err := s.deps.Waker.Wake(wctx, req.SandboxID); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return edgeapi.WakeResponse{}, errWakeTimeout
		}
		return edgeapi.WakeResponse{}, err
	}
	return edgeapi.WakeResponse{Ready: true}, nil
}
