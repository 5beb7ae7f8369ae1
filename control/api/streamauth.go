package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

// Authority ends the streams that rode on it, through the registry the
// edge uses too (internal/authority): the terminal stream, the exec (streaming or
// not), a followed service log and a sandbox's event stream are
// registered with the sandbox and token that admitted them and the
// token's expiry (the registry ends them when it passes), and an
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
// authority went away; Problem is what the client is told, and it
// unwraps to the authority package's reason.
type streamEnded struct {
	p      *problem.Problem
	reason error
}

func (e *streamEnded) Error() string { return "stream ended: " + e.p.Detail }
func (e *streamEnded) Unwrap() error { return e.reason }

// The details serve every kind of stream: a log or event stream runs no
// command of its own.
var (
	errStreamSandboxEnded = &streamEnded{problem.New(http.StatusConflict, "sandbox_ended",
		"the sandbox was deleted or ended; this stream and any command it ran were ended"), authority.ErrSandboxEnded}
	errStreamSandboxSuspended = &streamEnded{problem.New(http.StatusConflict, "sandbox_suspended",
		"the sandbox was suspended; this stream and any command it ran were ended (an exec or terminal wakes it)"), authority.ErrSandboxSuspended}
	errStreamTokenRevoked = &streamEnded{problem.New(http.StatusUnauthorized, "token_revoked",
		"the token that opened this stream was revoked; this stream and any command it ran were ended"), authority.ErrRevoked}
	errStreamTokenExpired = &streamEnded{problem.New(http.StatusUnauthorized, "token_expired",
		"the token that opened this stream expired; this stream and any command it ran were ended"), authority.ErrExpired}
)

// streamScope is the authority a stream rides on besides its token.
type streamScope uint8

const (
	// inSandbox: the stream reaches into the sandbox (a command, a
	// service's output), so it ends when the sandbox ends or is
	// suspended, as well as when its token is revoked or expires.
	inSandbox streamScope = iota
	// tokenOnly: the stream watches the sandbox from control's side (its
	// lifecycle events). A suspend or an end is what it reports, and it
	// ends by itself after a final state's event, so only its token's
	// revocation or expiry ends it early.
	tokenOnly
)

// endedBy reports the authority-ended cause of ctx, if that is why it
// ended.
func endedBy(ctx context.Context) (*streamEnded, bool) {
	var se *streamEnded
	ok := errors.As(context.Cause(ctx), &se)
	return se, ok
}

// liveStream is one open stream, as its registration records it.
type liveStream struct {
	sandboxID, accountID, tokenID string
	scope                         streamScope
	opened                        time.Time
	cancel                        context.CancelCauseFunc
}

// stream is a registered stream.
type stream = *authority.Conn[*liveStream]

// streamCause is the cause a stream's context ends with when the
// registry ends it: what the client is told.
func streamCause(cause error) error {
	var se *streamEnded
	switch {
	case errors.As(cause, &se):
		return se
	case errors.Is(cause, authority.ErrExpired):
		return errStreamTokenExpired
	}
	return cause
}

// watchStream gives a stream on sandboxID, whose authority was checked at
// epoch (read before the sandbox was), its context: it ends with the
// request, or with a *streamEnded cause when the authority scope names
// goes, or when the token that opened it expires. sw.done must be called
// when the stream ends. ok is false when an invalidation since epoch took
// the authority away already; the problem has been answered then.
func (s *Server) watchStream(w http.ResponseWriter, r *http.Request, sandboxID string, scope streamScope, epoch uint64) (ctx context.Context, cancel context.CancelCauseFunc, sw *streamWatch, ok bool) {
	ctx, cancel = context.WithCancelCause(r.Context())
	c, refused := s.trackStream(ctx, r, sandboxID, scope, epoch, cancel)
	if refused != nil {
		cancel(nil)
		writeProblem(w, r, refused.p)
		return nil, nil, nil, false
	}
	return ctx, cancel, &streamWatch{s: s, ctx: ctx, c: c}, true
}

// streamWatch is a stream registered by watchStream.
type streamWatch struct {
	s   *Server
	ctx context.Context // the stream's, from watchStream
	c   stream
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
			sw.c.Value.cancel(errShuttingDown)
		case <-sw.ctx.Done():
		}
	}()
}

// done unregisters the stream, ends its context and waits for what
// endOnShutdown started.
func (sw *streamWatch) done() {
	sw.s.streams.Remove(sw.c)
	sw.c.Value.cancel(nil)
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
		sw.s.recheckSandbox(ctx, []stream{sw.c})
		sw.s.recheckTokens(ctx, []stream{sw.c})
	}
	return endedBy(ctx)
}

// trackStream registers a stream whose authority was checked at epoch
// (read before target), ending with cancel when that authority goes or
// its token expires. gone is not nil when an invalidation since epoch
// already took the authority away, or the token has expired since it
// was checked, and says why; nothing is registered then.
func (s *Server) trackStream(ctx context.Context, r *http.Request, sandboxID string, scope streamScope, epoch uint64, cancel context.CancelCauseFunc) (c stream, gone *streamEnded) {
	ls := &liveStream{sandboxID: sandboxID, accountID: account(r).ID, tokenID: callerID(r),
		scope: scope, opened: s.now(), cancel: cancel}
	keys := []authority.Key{{Kind: authority.Token, ID: ls.accountID}}
	if scope == inSandbox {
		keys = append(keys, authority.Key{Kind: authority.Sandbox, ID: sandboxID})
	}
	c, raced := s.streams.Register(epoch, authority.Registration[*liveStream]{
		Keys: keys, Expires: tokenExpires(r), Value: ls,
		End: func(cause error) { cancel(streamCause(cause)) },
	})
	if raced {
		s.recheckSandbox(ctx, []stream{c})
		s.recheckTokens(ctx, []stream{c})
	}
	if se, ended := endedBy(ctx); ended {
		s.streams.Remove(c)
		return nil, se
	}
	return c, nil
}

// Invalidate applies an invalidation: the streams it concerns are checked
// again and those no longer admitted are ended. It returns once they are
// checked. Safe for concurrent use.
func (s *Server) Invalidate(ctx context.Context, inv edgeapi.Invalidation) {
	switch inv.Kind {
	case edgeapi.InvalidateSandbox:
		s.recheckSandbox(ctx, s.streams.Invalidate(authority.Key{Kind: authority.Sandbox, ID: inv.SandboxID}))
	case edgeapi.InvalidateToken:
		s.recheckTokens(ctx, s.streams.Invalidate(authority.Key{Kind: authority.Token, ID: inv.AccountID}))
	case edgeapi.InvalidatePort, edgeapi.InvalidateMembers, edgeapi.InvalidateShare:
		// Preview authority only: no stream of control's rides on it.
	default:
		// A kind from a newer control: check everything rather than miss
		// what it meant.
		all := s.streams.InvalidateAll()
		s.recheckSandbox(ctx, all)
		s.recheckTokens(ctx, all)
	}
}

// recheckSandbox ends the streams in a sandbox that left ready. A store
// fault ends nothing: an answer that could not be had is not a "no".
func (s *Server) recheckSandbox(ctx context.Context, streams []stream) {
	states := map[string]*streamEnded{}
	for _, c := range streams {
		ls := c.Value
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
			s.endStream(ctx, c, cause)
		}
	}
}

// recheckTokens ends the streams whose token was revoked. One query
// covers them all: revocations since the oldest of them opened. Expiry
// is not asked about: the registry ends a stream when its token expires.
func (s *Server) recheckTokens(ctx context.Context, streams []stream) {
	if len(streams) == 0 {
		return
	}
	oldest := streams[0].Value.opened
	for _, c := range streams[1:] {
		if c.Value.opened.Before(oldest) {
			oldest = c.Value.opened
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
	for _, c := range streams {
		if revoked[c.Value.tokenID] {
			s.endStream(ctx, c, errStreamTokenRevoked)
		}
	}
}

func (s *Server) endStream(ctx context.Context, c stream, cause *streamEnded) {
	if c.End(cause) {
		s.log.InfoContext(ctx, "stream ended: authority gone", "sandbox_id", c.Value.sandboxID,
			"account_id", c.Value.accountID, "reason", cause.p.Code)
	}
}
