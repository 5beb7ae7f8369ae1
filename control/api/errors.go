package api

import (
	"context"
	"errors"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/podfiles"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// Errors produced by the API layer itself.
var (
	errRouteNotFound    = problem.New(http.StatusNotFound, "route_not_found", "no such endpoint")
	errMethodNotAllowed = problem.New(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this endpoint")
	errInternal         = problem.New(http.StatusInternalServerError, "internal", "internal error; it has been logged")
	// errStoreUnavailable answers a call the database could not serve for
	// the moment (a restart, a failover, a dropped connection): the same
	// call may succeed in a moment, so it is 503 with Retry-After, not 500.
	errStoreUnavailable = func() *problem.Problem {
		p := problem.New(http.StatusServiceUnavailable, "store_unavailable",
			"the database is unavailable for the moment; try again shortly")
		p.RetryAfter = 2 * time.Second
		return p
	}()
	// errStoreFull answers a write the database's disk has no room for:
	// no retry helps until someone frees space on the server.
	errStoreFull = problem.New(http.StatusInsufficientStorage, "storage_full",
		"the service's database has no disk space left; the operator must free space")
)

func stack() []byte { return debug.Stack() }

// writeError is the one place an error becomes a response. Unknown errors
// are logged and answered with a bare 500, so internals never leak.
func writeError(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, r, toProblem(r, err))
}

func writeProblem(w http.ResponseWriter, r *http.Request, p *problem.Problem) {
	cp := *p // the package-level problems are shared; Instance is per request
	problem.Write(w, r, &cp)
}

// errClientGone answers a request whose client closed it first (nginx's
// 499); it is written for the log's sake only.
var errClientGone = func() *problem.Problem {
	p := problem.New(499, "client_closed_request", "the client closed the request before the answer")
	p.Title = "Client Closed Request" // no status text of net/http's
	return p
}()

// refusal is an account rule's refusal as the caller reads it: from the
// rule's own words on, without what the call was doing around it ("create
// sandbox: ", "begin restore of sbx-...: "), which says nothing to them.
func refusal(err, rule error) string {
	msg := err.Error()
	if i := strings.Index(msg, rule.Error()); i > 0 {
		return msg[i:]
	}
	return msg
}

func toProblem(r *http.Request, err error) *problem.Problem {
	var p *problem.Problem
	if errors.As(err, &p) {
		return p
	}
	if p, ok := lifecycleProblem(err); ok {
		return p
	}
	var fe *lifecycle.FieldError
	var se *lifecycle.StateError
	var pe *podfiles.PathError
	var she *lifecycle.ShortenError
	switch {
	case errors.As(err, &fe):
		code := "invalid_request"
		p := problem.New(http.StatusUnprocessableEntity, code, fe.Error())
		p.Errors = []problem.FieldError{{Field: fe.Field, Detail: fe.Detail}}
		if fe.Field == "Idempotency-Key" {
			p.Status, p.Title = http.StatusBadRequest, http.StatusText(http.StatusBadRequest)
		}
		return p
	case errors.As(err, &she):
		return problem.New(http.StatusConflict, "deadline_shortened", she.Error())
	case errors.As(err, &se):
		return problem.New(http.StatusConflict, "sandbox_state", se.Error())
	case errors.As(err, &pe):
		return problem.New(http.StatusBadRequest, "invalid_path", pe.Error())
	case errors.Is(err, lifecycle.ErrNotFound):
		return problem.New(http.StatusNotFound, "sandbox_not_found", "no sandbox with that id in this account")
	case errors.Is(err, lifecycle.ErrLimit):
		return problem.New(http.StatusTooManyRequests, "concurrency_limit", refusal(err, lifecycle.ErrLimit))
	case errors.Is(err, lifecycle.ErrUnknownProfile):
		p := problem.New(http.StatusUnprocessableEntity, "unknown_profile", err.Error())
		field := "unknown profile"
		var upe *lifecycle.UnknownProfileError
		if errors.As(err, &upe) && len(upe.Known) > 0 {
			field += "; one of: " + strings.Join(upe.Known, ", ")
		}
		p.Errors = []problem.FieldError{{Field: "profile", Detail: field}}
		return p
	case errors.Is(err, lifecycle.ErrSecretsDisabled):
		return problem.New(http.StatusServiceUnavailable, "secrets_disabled", err.Error())
	case errors.Is(err, lifecycle.ErrSecretNotFound):
		return problem.New(http.StatusNotFound, "secret_not_found", "this account has no secret of that name")
	case errors.Is(err, lifecycle.ErrDisabled):
		return problem.New(http.StatusForbidden, "feature_disabled", refusal(err, lifecycle.ErrDisabled))
	case errors.Is(err, lifecycle.ErrPlatformNotAllowed):
		return problem.New(http.StatusForbidden, "platform_not_allowed", refusal(err, lifecycle.ErrPlatformNotAllowed))
	case errors.Is(err, lifecycle.ErrIdempotencyReuse):
		return problem.New(http.StatusUnprocessableEntity, "idempotency_key_reused",
			"this Idempotency-Key was used with a different request body")
	case errors.Is(err, context.DeadlineExceeded):
		return problem.New(http.StatusGatewayTimeout, "timeout", "the sandbox did not answer in time")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away (mid-wake, say): nobody reads the
		// answer, and nothing failed on our side.
		logger(r).DebugContext(r.Context(), "client gone", "err", err, "path", r.URL.Path)
		return errClientGone
	case errors.Is(err, store.ErrFull):
		logger(r).ErrorContext(r.Context(), "database disk full", "err", err, "path", r.URL.Path)
		return errStoreFull
	case errors.Is(err, store.ErrUnavailable):
		logger(r).WarnContext(r.Context(), "database unavailable", "err", err, "path", r.URL.Path)
		return errStoreUnavailable
	}
	logger(r).ErrorContext(r.Context(), "request failed", "err", err, "path", r.URL.Path)
	return errInternal
}
