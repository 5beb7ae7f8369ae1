package api

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

// Authority ends the streams that rode on it, as at the edge (see
// edge/preview/conns.go): the terminal stream, the exec (streaming or
// not), a followed service log and a sandbox's event stream are
// registered with the sandbox and token that admitted them, and an
// edgeapi.Invalidation (from the Redis invalidation channel, or
// in-process when control publishes none) has the affected ones checked
// again against the store. Those no longer admitted end at once: the
// command is ended, a terminal gets a final error message and close code
// 1008 with the reason, an event stream a final "error" event.

// streamRevokedWindow is how far before a stream opened a revocation of
// its token is looked for: a ticket lets a stream open up to ticketTTL
// after its token was last checked, and revoked_at is written with the
// clock of whoever revoked (as in control's revocation watcher).
const streamRevokedWindow = time.Minute

// streamEnded is the cause of a stream's context ended because its
// authority went away; Problem is what the client is told.
type streamEnded struct{ p *problem.Problem }

func (e *streamEnded) Error() string { return "stream ended: " + e.p.Detail }

// The details serve every kind of stream: a log or event stream runs no
// command of its own.
var (
	errStreamSandboxEnded = &streamEnded{problem.New(http.StatusConflict, "sandbox_ended",
		"the sandbox was deleted or ended; this stream and any command it ran were ended")}
	errStreamSandboxSuspended = &streamEnded{problem.New(http.StatusConflict, "sandbox_suspended",
		"the sandbox was suspended; this stream and any command it ran were ended (an exec or terminal wakes it)")}
	errStreamTokenRevoked = &streamEnded{problem.New(http.StatusUnauthorized, "token_revoked",
		"the token that opened this stream was revoked; this stream and any command it ran were ended")}
)

// streamScope is the authority a stream rides on besides its token.
type streamScope uint8

const (
	// inSandbox: the stream reaches into the sandbox (a command, a
	// service's output), so it ends when the sandbox ends or is
	// suspended, as well as when its token is revoked.
	inSandbox streamScope = iota
	// tokenOnly: the stream watches the sandbox from control's side (its
	// lifecycle events). A suspend or an end is what it reports, and it
	// ends by itself after a final state's event, so only the token's
	// revocation ends it early.
	tokenOnly
)

// endedBy reports the authority-ended cause of ctx, if that is why it
// ended.
func endedBy(ctx context.Context) (*streamEnded, bool) {
	var se *streamEnded
	ok := errors.As(context.Cause(ctx), &se)
	return se, ok
}

// liveStream is one open stream.
type liveStream struct {
	sandboxID, accountID, tokenID string
	scope                         streamScope
	opened                        time.Time
	cancel                        context.CancelCauseFunc
}

// streamSet is the registry of open streams. A linear scan per
// invalidation is fine: invalidations are rare next to stream opens.
type streamSet struct {
	mu sync.Mutex // guards m
	m  map[*liveStream]struct{}
	// epoch is bumped by every invalidation, so a stream authorised
	// before one and registered after it is checked again (see track).
	epoch atomic.Uint64
}

func (ss *streamSet) match(f func(*liveStream) bool) []*liveStream {
	ss.mu.Lock()
	all := slices.Collect(maps.Keys(ss.m))
	ss.mu.Unlock()
	return slices.DeleteFunc(all, func(ls *liveStream) bool { return !f(ls) })
}

// watchStream gives a stream on sandboxID, whose authority was checked at
// epoch (read before the sandbox was), its context: it ends with the
// request, or with a *streamEnded cause when the authority scope names
// goes. sw.done must be called when the stream ends. ok is false when an
// invalidation since epoch took the authority away already; the problem
// has been answered then.
func (s *Server) watchStream(w http.ResponseWriter, r *http.Request, sandboxID string, scope streamScope, epoch uint64) (ctx context.Context, cancel context.CancelCauseFunc, sw *streamWatch, ok bool) {
	ctx, cancel = context.WithCancelCause(r.Context())
	ls, untrack, refused := s.trackStream(ctx, r, sandboxID, scope, epoch, cancel)
	if refused != nil {
		cancel(nil)
		writeProblem(w, r, refused.p)
		return nil, nil, nil, false
	}
	return ctx, cancel, &streamWatch{s: s, ctx: ctx, ls: ls, untrack: untrack}, true
}

// streamWatch is a stream registered by watchStream.
type streamWatch struct {
	s       *Server
	ctx     context.Context // the stream's, from watchStream
	ls      *liveStream
	untrack func()
	// stopped is closed when endOnShutdown's goroutine has returned; nil
	// when there is none.
	stopped chan struct{}
}

// endOnShutdown ends the stream with errShuttingDown when control stops
// its streams (StopStreams): a long-lived stream would otherwise hold
// http.Server.Shutdown until its deadline. Call it at most once, before
// done.
func (sw *streamWatch) endOnShutdown() {
	sw.stopped = make(chan struct{})
	go func() { // owned by sw: done ends and waits for it
		defer close(sw.stopped)
		select {
		case <-sw.s.stopStreams:
			sw.ls.cancel(errShuttingDown)
		case <-sw.ctx.Done():
		}
	}()
}

// done unregisters the stream, ends its context and waits for what
// endOnShutdown started.
func (sw *streamWatch) done() {
	sw.untrack()
	sw.ls.cancel(nil)
	if sw.stopped != nil {
		<-sw.stopped
	}
}

// failed reports whether the command of the stream whose context is ctx
// failed because the stream's authority went, and why. The end of a
// sandbox can break the command's session before the invalidation saying
// so arrives: a delete destroys the sandbox at once, and through Redis
// the invalidation comes back asynchronously. So when ctx has not ended
// at all yet, the store is asked now, rather than the client being told
// of a broken session (or nothing) instead of why.
func (sw *streamWatch) failed(ctx context.Context) (*streamEnded, bool) {
	if ctx.Err() == nil {
		sw.s.recheckSandbox(ctx, []*liveStream{sw.ls})
		sw.s.recheckTokens(ctx, []*liveStream{sw.ls})
	}
	return endedBy(ctx)
}

// trackStream registers a stream whose authority was checked at epoch
// (read before target), ending with cancel when that authority goes. The
// returned untrack must be called when the stream ends. gone is not nil
// when an invalidation since epoch already took the authority away, and
// says why; nothing is registered then.
func (s *Server) trackStream(ctx context.Context, r *http.Request, sandboxID string, scope streamScope, epoch uint64, cancel context.CancelCauseFunc) (ls *liveStream, untrack func(), gone *streamEnded) {
	ls = &liveStream{sandboxID: sandboxID, accountID: account(r).ID, tokenID: callerID(r),
		scope: scope, opened: s.now(), cancel: cancel}
	s.streams.mu.Lock()
	if s.streams.m == nil {
		s.streams.m = map[*liveStream]struct{}{}
	}
	s.streams.m[ls] = struct{}{}
	s.streams.mu.Unlock()
	untrack = func() {
		s.streams.mu.Lock()
		delete(s.streams.m, ls)
		s.streams.mu.Unlock()
	}
	if s.streams.epoch.Load() != epoch {
		s.recheckSandbox(ctx, []*liveStream{ls})
		s.recheckTokens(ctx, []*liveStream{ls})
		if se, ended := endedBy(ctx); ended {
			untrack()
			return nil, nil, se
		}
	}
	return ls, untrack, nil
}

// Invalidate applies an invalidation: the streams it concerns are checked
// again and those no longer admitted are ended. It returns once they are
// checked. Safe for concurrent use.
func (s *Server) Invalidate(ctx context.Context, inv edgeapi.Invalidation) {
	s.streams.epoch.Add(1)
	switch inv.Kind {
	case edgeapi.InvalidateSandbox:
		s.recheckSandbox(ctx, s.streams.match(func(ls *liveStream) bool { return ls.sandboxID == inv.SandboxID }))
	case edgeapi.InvalidateToken:
		s.recheckTokens(ctx, s.streams.match(func(ls *liveStream) bool {
			return inv.AccountID == "" || ls.accountID == inv.AccountID
		}))
	case edgeapi.InvalidatePort, edgeapi.InvalidateMembers:
		// Preview authority only: no stream of control's rides on it.
	default:
		// A kind from a newer control: check everything rather than miss
		// what it meant.
		all := s.streams.match(func(*liveStream) bool { return true })
		s.recheckSandbox(ctx, all)
		s.recheckTokens(ctx, all)
	}
}

// recheckSandbox ends the streams in a sandbox that left ready. A store
// fault ends nothing: an answer that could not be had is not a "no".
func (s *Server) recheckSandbox(ctx context.Context, streams []*liveStream) {
	states := map[string]*streamEnded{}
	for _, ls := range streams {
		if ls.scope != inSandbox {
			continue
		}
		cause, seen := states[ls.sandboxID]
		if !seen {
			sb, err := s.store.Sandbox(ctx, ls.sandboxID)
			switch {
			case errors.Is(err, store.ErrNotFound):
				cause = errStreamSandboxEnded
			case err != nil:
				s.log.WarnContext(ctx, "re-check of stream failed; kept", "sandbox_id", ls.sandboxID, "err", err)
			case lifecycle.AdmissionOf(sb) == lifecycle.Ready:
			case lifecycle.AdmissionOf(sb) == lifecycle.Wakeable:
				cause = errStreamSandboxSuspended
			default:
				cause = errStreamSandboxEnded
			}
			states[ls.sandboxID] = cause
		}
		if cause != nil {
			s.endStream(ctx, ls, cause)
		}
	}
}

// recheckTokens ends the streams whose token was revoked. One query
// covers them all: revocations since the oldest of them opened.
func (s *Server) recheckTokens(ctx context.Context, streams []*liveStream) {
	if len(streams) == 0 {
		return
	}
	oldest := streams[0].opened
	for _, ls := range streams[1:] {
		if ls.opened.Before(oldest) {
			oldest = ls.opened
		}
	}
	toks, err := s.store.TokensRevokedSince(ctx, oldest.Add(-streamRevokedWindow))
	if err != nil {
		s.log.WarnContext(ctx, "re-check of stream tokens failed; kept", "err", err)
		return
	}
	revoked := make(map[string]bool, len(toks))
	for _, t := range toks {
		revoked[t.ID] = true
	}
	for _, ls := range streams {
		if revoked[ls.tokenID] {
			s.endStream(ctx, ls, errStreamTokenRevoked)
		}
	}
}

func (s *Server) endStream(ctx context.Context, ls *liveStream, cause *streamEnded) {
	s.log.InfoContext(ctx, "stream ended: authority gone", "sandbox_id", ls.sandboxID,
		"account_id", ls.accountID, "reason", cause.p.Code)
	ls.cancel(cause)
}
