package api

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// snapshotView is a snapshot as the API shows it.
type snapshotView struct {
	ID        string              `json:"id"`
	SandboxID string              `json:"sandbox_id"`
	Status    store.SnapshotState `json:"status"`
	Platform  string              `json:"platform"`
	Profile   string              `json:"profile"`
	Name      *string             `json:"name"`
	Labels    map[string]string   `json:"labels"`
	Reason    *string             `json:"reason"`
	CreatedAt time.Time           `json:"created_at"`
	ReadyAt   *time.Time          `json:"ready_at"`
	DeletedAt *time.Time          `json:"deleted_at"`
}

func viewSnapshot(s store.Snapshot) snapshotView {
	v := snapshotView{
		ID: s.ID, SandboxID: s.SandboxID, Status: s.State, Platform: s.Platform, Profile: s.Profile,
		Name: optional(s.Name), Labels: s.Labels, Reason: optional(s.Reason), CreatedAt: s.CreatedAt.UTC(),
		ReadyAt: store.UTCPtr(s.ReadyAt), DeletedAt: store.UTCPtr(s.DeletedAt),
	}
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	return v
}

func viewSnapshots(list []store.Snapshot) map[string][]snapshotView {
	out := make([]snapshotView, 0, len(list))
	for _, s := range list {
		out = append(out, viewSnapshot(s))
	}
	return map[string][]snapshotView{"snapshots": out}
}

// createSnapshot is POST .../snapshots: 201 once the copy is ready (the
// sandbox keeps running), 202 while it is still being made past
// WakeTimeout; a copy that failed is 201 with status failed and a reason.
func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.SnapshotRequest
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WakeTimeout)
	defer cancel()
	snap, err := s.life.TakeSnapshot(ctx, account(r), chi.URLParam(r, "id"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/snapshots/"+snap.ID)
	status := http.StatusCreated
	if snap.State == store.SnapshotCreating {
		status = http.StatusAccepted
	}
	writeJSON(w, status, viewSnapshot(snap))
}

// listSandboxSnapshots is GET .../snapshots: the sandbox's snapshots that
// were not deleted, newest first.
func (s *Server) listSandboxSnapshots(w http.ResponseWriter, r *http.Request) {
	list, err := s.life.Snapshots(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSnapshots(list))
}

// listSnapshots is GET /snapshots: every snapshot of the account that was
// not deleted, those of deleted sandboxes too.
func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	list, err := s.life.Snapshots(r.Context(), account(r), "")
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSnapshots(list))
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.life.Snapshot(r.Context(), account(r), chi.URLParam(r, "snap"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSnapshot(snap))
}

// deleteSnapshot is DELETE /snapshots/{snap}: its storage line closes at
// once; deleting it again answers the deleted snapshot.
func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.life.DeleteSnapshot(r.Context(), account(r), chi.URLParam(r, "snap"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, viewSnapshot(snap))
}

// restoreRequest is POST .../restore.
type restoreRequest struct {
	Snapshot string `json:"snapshot"`
}

// restoreSandbox rolls the sandbox back to a snapshot in place and
// answers once it is ready again, held up to WakeTimeout like a start;
// past that it is 503 with Retry-After while the restore goes on.
func (s *Server) restoreSandbox(w http.ResponseWriter, r *http.Request) {
	var req restoreRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Snapshot == "" {
		p := problem.New(http.StatusUnprocessableEntity, "invalid_request", "snapshot: is required")
		p.Errors = []problem.FieldError{{Field: "snapshot", Detail: "is required"}}
		writeProblem(w, r, p)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.WakeTimeout)
	defer cancel()
	sb, err := s.life.RestoreSnapshot(ctx, account(r), chi.URLParam(r, "id"), req.Snapshot)
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

// recreateSandbox destroys the sandbox and creates its successor from
// its stored create request: 201 with the new (pending) sandbox.
func (s *Server) recreateSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.life.Recreate(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	writeJSON(w, http.StatusCreated, s.view(sb))
}
