package internalapi

import (
	"errors"
	"net/http"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

var (
	errUnauthorized     = problem.New(http.StatusUnauthorized, edgeapi.CodeUnauthorized, "missing or wrong internal API secret")
	errRouteNotFound    = problem.New(http.StatusNotFound, edgeapi.CodeRouteNotFound, "no such internal endpoint")
	errMethodNotAllowed = problem.New(http.StatusMethodNotAllowed, "method_not_allowed", "method not allowed on this endpoint")
	errInternal         = problem.New(http.StatusInternalServerError, edgeapi.CodeInternal, "internal error; it has been logged")
	errUnavailable      = func() *problem.Problem {
		p := problem.New(http.StatusServiceUnavailable, edgeapi.CodeUnavailable, "control's database is unavailable for the moment")
		p.RetryAfter = 2 * time.Second
		return p
	}()
)

func badRequest(detail string) *problem.Problem {
	return problem.New(http.StatusBadRequest, edgeapi.CodeInvalidRequest, detail)
}

// wakeRefusals maps lifecycle's errors to the wake endpoint's codes; the
// other endpoints' refusals are edgeapi.Refusal values already.
var wakeRefusals = []struct {
	err    error
	status int
	code   string
}{
	{lifecycle.ErrNotFound, http.StatusNotFound, edgeapi.CodeWakeUnknownSandbox},
	{lifecycle.ErrCannotWake, http.StatusConflict, edgeapi.CodeWakeEnded},
	{lifecycle.ErrLimit, http.StatusTooManyRequests, edgeapi.CodeWakeLimit},
	{lifecycle.ErrDisabled, http.StatusTooManyRequests, edgeapi.CodeWakeLimit},
	{lifecycle.ErrPlatformNotAllowed, http.StatusTooManyRequests, edgeapi.CodeWakeLimit},
	// A stopped sandbox with wake_on_traffic false: refused, and the
	// detail says how to start it.
	{lifecycle.ErrWakeDisabled, http.StatusConflict, edgeapi.CodeWakeLimit},
}

// toProblem is the one place an error becomes a response. Unknown errors
// are logged and answered with a bare 500.
func (s *Server) toProblem(r *http.Request, err error) *problem.Problem {
	var p *problem.Problem
	if errors.As(err, &p) {
		return p
	}
	if nr := (*edgeapi.SSHNotReadyError)(nil); errors.As(err, &nr) {
		p := problem.New(edgeapi.ErrSSHNotReady.Status, edgeapi.ErrSSHNotReady.Code, nr.Error())
		p.SandboxID = nr.SandboxID
		return p
	}
	if r := (*edgeapi.Refusal)(nil); errors.As(err, &r) {
		return problem.New(r.Status, r.Code, r.Error())
	}
	for _, m := range wakeRefusals {
		if errors.Is(err, m.err) {
			return problem.New(m.status, m.code, m.err.Error())
		}
	}
	if errors.Is(err, store.ErrUnavailable) {
		s.log.WarnContext(r.Context(), "internal request: database unavailable", "path", r.URL.Path, "err", err)
		return errUnavailable
	}
	s.log.ErrorContext(r.Context(), "internal request failed", "path", r.URL.Path, "err", err)
	return errInternal
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	cp := *s.toProblem(r, err) // package-level problems are shared; Instance is per request
	problem.Write(w, r, &cp)
}
