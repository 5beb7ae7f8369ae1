package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/initproto"
	"github.com/sbxedge/sbx/internal/problem"
)

var errServiceNotFound = problem.New(http.StatusNotFound, "service_not_found", "this sandbox declares no service with that name")

// serviceNotFound is service_not_found naming the declared services.
func serviceNotFound(e *lifecycle.UnknownServiceError) *problem.Problem {
	return problem.New(http.StatusNotFound, "service_not_found", e.Error())
}

type serviceRequest struct {
	Command string            `json:"command"`
	Args    []string          `json:"args"`
	Cwd     string            `json:"cwd"`
	Env     map[string]string `json:"env"`
	Port    int               `json:"port"`
}

type serviceView struct {
	Name        string            `json:"name"`
	Command     string            `json:"command"`
	Args        []string          `json:"args"`
	Cwd         string            `json:"cwd"`
	Env         map[string]string `json:"env"`
	Port        *int              `json:"port"`
	State       string            `json:"state"`
	ExitCode    *int              `json:"exit_code"`
	Starts      int               `json:"starts"`
	LastStartAt *time.Time        `json:"last_start_at"`
	LastExitAt  *time.Time        `json:"last_exit_at"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
}

type serviceListView struct {
	Services []serviceView `json:"services"`
}

func viewService(st lifecycle.ServiceStatus) serviceView {
	v := serviceView{
		Name: st.Name, Command: st.Command, Args: st.Args, Cwd: st.Cwd, Env: st.Env, State: st.State,
		ExitCode: st.ExitCode, Starts: st.Starts, LastStartAt: st.LastStartAt, LastExitAt: st.LastExitAt,
		CreatedAt: st.CreatedAt.UTC(), UpdatedAt: st.UpdatedAt.UTC(),
	}
	if v.Args == nil {
		v.Args = []string{}
	}
	if v.Env == nil {
		v.Env = map[string]string{}
	}
	if st.Port != 0 {
		v.Port = &st.Port
	}
	return v
}

func (s *Server) putService(w http.ResponseWriter, r *http.Request) {
	var req serviceRequest
	if !s.decode(w, r, &req) {
		return
	}
	st, err := s.life.PutService(r.Context(), account(r), chi.URLParam(r, "id"), lifecycle.ServiceSpec{
		Name: chi.URLParam(r, "name"), Command: req.Command, Args: req.Args, Cwd: req.Cwd, Env: req.Env, Port: req.Port,
	})
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewService(st))
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request) {
	list, err := s.life.Services(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, serviceListView{Services: views(list, viewService)})
}

func (s *Server) getService(w http.ResponseWriter, r *http.Request) {
	list, err := s.life.Services(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	rows := make([]store.Service, 0, len(list))
	for _, st := range list {
		if st.Name == chi.URLParam(r, "name") {
			writeJSON(w, http.StatusOK, viewService(st))
			return
		}
		rows = append(rows, st.Service)
	}
	writeProblem(w, r, serviceNotFound(lifecycle.UnknownService(chi.URLParam(r, "name"), rows)))
}

func (s *Server) deleteService(w http.ResponseWriter, r *http.Request) {
	if err := s.life.DeleteService(r.Context(), account(r), chi.URLParam(r, "id"), chi.URLParam(r, "name")); err != nil {
		writeServiceError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// maxLogTail bounds ?tail=: the init keeps 1000 lines per service.
const maxLogTail = 1000

// serviceLogs answers the last lines of a service's output as text, one
// line each, or, with ?follow=1 (or Accept: text/event-stream), streams
// them and every new line as server-sent events ("line" events whose
// data is {"at","text"}).
func (s *Server) serviceLogs(w http.ResponseWriter, r *http.Request) {
	tail := 100
	if v := r.URL.Query().Get("tail"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxLogTail {
			writeProblem(w, r, badQuery("tail", fmt.Sprintf("must be between 1 and %d", maxLogTail)))
			return
		}
		tail = n
	}
	follow := strings.Contains(r.Header.Get("Accept"), "text/event-stream")
	if v := r.URL.Query().Get("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeProblem(w, r, badQuery("follow", "must be true or false"))
			return
		}
		follow = b
	}
	if follow {
		s.followServiceLogs(w, r, tail)
		return
	}
	var lines []string
	err := s.life.ServiceLogs(r.Context(), account(r), chi.URLParam(r, "id"), chi.URLParam(r, "name"), tail, func(l initproto.Line) error {
		lines = append(lines, l.Text)
		return nil
	})
	if err != nil {
		writeServiceError(w, r, err)
		return
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	for _, l := range lines {
		_, _ = fmt.Fprintln(w, l)
	}
}

// followServiceLogs streams a service's output (the follow of
// serviceLogs) until the client goes. It ends early, with a last "error"
// event saying why, when its token is revoked, when the sandbox ends or is
// suspended (the init that holds the output stops with it, and a client
// should hear why rather than see the stream drop), or when control shuts
// down (streamauth.go).
func (s *Server) followServiceLogs(w http.ResponseWriter, r *http.Request, tail int) {
	epoch := s.streams.Epoch() // before the sandbox is checked
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	ctx, _, sw, ok := s.watchStream(w, r, sb.ID, inSandbox, epoch)
	if !ok {
		return
	}
	defer sw.done()
	sw.endOnShutdown()
	rc := http.NewResponseController(w)
	started := false
	start := func() error {
		if started {
			return nil
		}
		started = true
		w.Header().Set("Content-Type", "text/event-stream")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Accel-Buffering", "no")
		w.WriteHeader(http.StatusOK)
		return rc.Flush()
	}
	// Headers go out with the first line, or as soon as the init has
	// accepted the follow (nothing to send yet): the check of the
	// sandbox and service comes first, so a refusal is still a problem.
	event := func(name string, v any) error {
		if err := start(); err != nil {
			return err
		}
		data, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", name, data); err != nil {
			return err
		}
		return rc.Flush()
	}
	err := s.life.FollowServiceLogs(ctx, account(r), sb.ID, chi.URLParam(r, "name"), tail, start, func(l initproto.Line) error {
		return event("line", l)
	})
	if r.Context().Err() != nil {
		return // the client went
	}
	if err != nil && !started && ctx.Err() == nil {
		writeServiceError(w, r, err) // refused, or failed before a line
		return
	}
	// The init's end with its sandbox ends the follow without an error,
	// so the authority is asked whatever err is.
	gone, ended := sw.failed(ctx)
	switch {
	case ended:
		_ = event("error", gone.p)
	case errors.Is(context.Cause(ctx), errShuttingDown):
		_ = event("error", shuttingDown)
	case err != nil && !started:
		writeServiceError(w, r, err)
	case err != nil:
		_ = event("error", toProblem(r, err))
	default:
		_ = start()
	}
}

func writeServiceError(w http.ResponseWriter, r *http.Request, err error) {
	var use *lifecycle.UnknownServiceError
	if errors.As(err, &use) {
		writeProblem(w, r, serviceNotFound(use))
		return
	}
	if errors.Is(err, lifecycle.ErrUnknownService) {
		writeProblem(w, r, errServiceNotFound)
		return
	}
	writeError(w, r, err)
}
