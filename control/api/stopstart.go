package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// suspendSandbox stops a sandbox (POST .../suspend): 202 while its
// snapshot is taken, 200 once it is suspended; asking again is safe.
func (s *Server) suspendSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.life.Stop(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if sb.State == store.StateSuspending {
		status = http.StatusAccepted
	}
	writeJSON(w, status, s.view(sb))
}

// resumeSandbox starts a stopped sandbox (POST .../resume) and answers
// once it is ready, holding the request up to WakeTimeout like a wake;
// past that it is 503 with Retry-After while the restore goes on.
// Starting a ready sandbox answers 200 at once.
func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WakeTimeout)
	defer cancel()
	sb, err := s.life.Resume(ctx, account(r), chi.URLParam(r, "id"))
	if errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil {
		p := problem.New(http.StatusServiceUnavailable, "sandbox_waking", wakeWaitDetail(err))
		p.RetryAfter = wakeRetryAfter
		writeProblem(w, r, p)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(sb))
}

// ensureSandbox is PUT /sandboxes/by-name/{name}: the live sandbox of
// that name (200), or a new one created from the body (201). Concurrent
// calls make one sandbox.
func (s *Server) ensureSandbox(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.CreateRequest
	if r.ContentLength != 0 {
		if !s.decode(w, r, &req) {
			return
		}
	}
	req.Caller = callerID(r)
	sb, created, err := s.life.Ensure(r.Context(), account(r), chi.URLParam(r, "name"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.view(sb))
}

// lifecycleProblem maps the errors of stop, start, names and wake flags;
// ok is false for any other error.
func lifecycleProblem(err error) (*problem.Problem, bool) {
	switch {
	case errors.Is(err, lifecycle.ErrWakeDisabled):
		return problem.New(http.StatusConflict, "sandbox_stopped", lifecycle.ErrWakeDisabled.Error()), true
	case errors.Is(err, lifecycle.ErrCannotStop):
		return problem.New(http.StatusConflict, "cannot_stop", lifecycle.ErrCannotStop.Error()), true
	case errors.Is(err, lifecycle.ErrSnapshotsUnsupported):
		return problem.New(http.StatusConflict, "snapshots_unsupported", lifecycle.ErrSnapshotsUnsupported.Error()), true
	case errors.Is(err, lifecycle.ErrSnapshotNotFound):
		return problem.New(http.StatusNotFound, "snapshot_not_found", "no snapshot with that id in this account"), true
	case errors.Is(err, lifecycle.ErrNoCreateRequest):
		return problem.New(http.StatusConflict, "cannot_recreate", lifecycle.ErrNoCreateRequest.Error()), true
	case errors.As(err, new(*lifecycle.SnapshotQuotaError)):
		var qe *lifecycle.SnapshotQuotaError
		errors.As(err, &qe)
		p := problem.New(http.StatusConflict, "snapshot_quota", qe.Error())
		p.Errors = []problem.FieldError{{Field: "snapshots", Detail: fmt.Sprintf("%d of at most %d for this account", qe.Count, qe.Limit)}}
		return p, true
	case errors.Is(err, lifecycle.ErrNameTaken):
		var nt *lifecycle.NameTakenError
		detail := err.Error()
		if errors.As(err, &nt) {
			detail = nt.Error()
		}
		p := problem.New(http.StatusConflict, "name_taken", detail)
		p.Errors = []problem.FieldError{{Field: "name", Detail: "is taken by another live sandbox"}}
		return p, true
	}
	return nil, false
}

// resolveName lets a sandbox's name stand for its ID in every
// /sandboxes/{id} route: a name is looked up in the caller's account and
// the route's id becomes the sandbox's ID, so each handler sees an ID.
// An unknown name is 404, like an unknown ID.
func (s *Server) resolveName(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rctx := chi.RouteContext(r.Context())
		v := chi.URLParam(r, "id")
		if rctx == nil || lifecycle.ValidID(v) || !lifecycle.ValidName(v) {
			next.ServeHTTP(w, r)
			return
		}
		sb, err := s.life.Resolve(r.Context(), account(r), v)
		if err != nil {
			writeError(w, r, err)
			return
		}
		for i, k := range rctx.URLParams.Keys {
			if k == "id" {
				rctx.URLParams.Values[i] = sb.ID
			}
		}
		next.ServeHTTP(w, r)
	})
}
