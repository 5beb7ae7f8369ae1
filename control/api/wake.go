package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// Activity records use of a sandbox (the subset of an activity store the
// API uses).
type Activity interface {
	Open(sandboxID string) (close func())
}

// wakeRetryAfter is what a client held past WakeTimeout is told to wait:
// restores usually finish within seconds of the limit.
const wakeRetryAfter = 5 * time.Second

// awaken records the call as an open connection until the request ends
// (a long exec or download keeps the sandbox awake) and, for a sandbox that is suspended
// (or on its way in or out), wakes it and holds the request until it is
// ready, up to WakeTimeout; past that the caller gets 503 with
// Retry-After while the restore goes on.
func (s *Server) awaken(r *http.Request, sb store.Sandbox) (store.Sandbox, error) {
	if s.activity != nil {
		context.AfterFunc(r.Context(), s.activity.Open(sb.ID))
	}
	if lifecycle.AdmissionOf(sb) != lifecycle.Wakeable {
		return sb, nil
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WakeTimeout)
	defer cancel()
	if err := s.life.Wake(ctx, sb.ID); err != nil {
		if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
			// One code, which clients retry on; the detail says what is
			// being waited for.
			p := problem.New(http.StatusServiceUnavailable, "sandbox_waking", wakeWaitDetail(err))
			p.RetryAfter = wakeRetryAfter
			return sb, p
		}
		return sb, err
	}
	return s.life.Get(r.Context(), account(r), sb.ID)
}

// wakeWaitDetail tells a caller held past WakeTimeout what the sandbox is
// still doing.
func wakeWaitDetail(err error) string {
	var we *lifecycle.WakeWaitError
	if errors.As(err, &we) {
		switch store.State(we.State) {
		case store.StateSuspending:
			return "the sandbox is still being suspended; it wakes once that finishes; retry shortly"
		case store.StatePending:
			return "the sandbox is still being provisioned; retry shortly"
		}
	}
	return "the sandbox is waking from suspension; retry shortly"
}

// effectiveDeadline is the deadline a client should see (the clock
// pauses while the sandbox is suspended).
func (s *Server) effectiveDeadline(sb store.Sandbox) time.Time {
	return lifecycle.EffectiveDeadline(sb, s.now(), s.life.Config().MaxLifetime)
}
