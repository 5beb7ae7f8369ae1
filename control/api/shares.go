package api

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

var errShareNotFound = problem.New(http.StatusNotFound, "share_not_found", "no share link with that id on this sandbox")

type shareRequest struct {
	ExpiresInMinutes *int   `json:"expires_in_minutes"`
	Note             string `json:"note"`
}

// shareView is a share link as listed: never its secret.
type shareView struct {
	ID          string     `json:"id"`
	Port        int        `json:"port"`
	Note        string     `json:"note"`
	CreatedAt   time.Time  `json:"created_at"`
	ExpiresAt   time.Time  `json:"expires_at"`
	FirstUsedAt *time.Time `json:"first_used_at,omitempty"`
	RevokedAt   *time.Time `json:"revoked_at,omitempty"`
	// State is active, expired or revoked.
	State string `json:"state"`
}

// newShareView is a share link as created: with the URL that carries
// its secret, shown this once.
type newShareView struct {
	shareView
	URL string `json:"url"`
}

func (s *Server) shareView(sh store.Share) shareView {
	state := "active"
	switch {
	case sh.RevokedAt != nil:
		state = "revoked"
	case !s.now().Before(sh.ExpiresAt):
		state = "expired"
	}
	return shareView{ID: sh.ID, Port: sh.Port, Note: sh.Note, CreatedAt: sh.CreatedAt, ExpiresAt: sh.ExpiresAt,
		FirstUsedAt: sh.FirstUsedAt, RevokedAt: sh.RevokedAt, State: state}
}

// sharePort reads the {port} of a share path; a malformed one is a port
// not exposed.
func sharePort(w http.ResponseWriter, r *http.Request) (int, bool) {
	port, err := strconv.Atoi(chi.URLParam(r, "port"))
	if err != nil || port < 1 || port > 65535 {
		writeProblem(w, r, errPortNotFound)
		return 0, false
	}
	return port, true
}

func (s *Server) createShare(w http.ResponseWriter, r *http.Request) {
	var req shareRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.cfg.PreviewDomain == "" {
		writeProblem(w, r, errPreviewUnavailable)
		return
	}
	port, ok := sharePort(w, r)
	if !ok {
		return
	}
	if req.ExpiresInMinutes == nil {
		writeError(w, r, &lifecycle.FieldError{Field: "expires_in_minutes", Detail: "is required"})
		return
	}
	id := chi.URLParam(r, "id")
	sh, err := s.life.CreateShare(r.Context(), account(r), callerID(r), id,
		lifecycle.ShareSpec{Port: port, Minutes: *req.ExpiresInMinutes, Note: req.Note})
	if errors.Is(err, lifecycle.ErrPortNotFound) {
		writeProblem(w, r, errPortNotFound)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	ps, err := s.store.PreviewPorts(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var label string
	for _, p := range ps {
		if p.Port == port {
			label = p.Label
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusCreated, newShareView{shareView: s.shareView(sh.Share),
		URL: s.previewURL(label) + "/?" + url.Values{edgeapi.ShareParam: {sh.Secret}}.Encode()})
}

func (s *Server) listShares(w http.ResponseWriter, r *http.Request) {
	port, ok := sharePort(w, r)
	if !ok {
		return
	}
	all, err := s.life.Shares(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := []shareView{}
	for _, sh := range all {
		if sh.Port == port {
			out = append(out, s.shareView(sh))
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"shares": out})
}

func (s *Server) deleteShare(w http.ResponseWriter, r *http.Request) {
	port, ok := sharePort(w, r)
	if !ok {
		return
	}
	sh, err := s.life.RevokeShare(r.Context(), account(r), callerID(r), chi.URLParam(r, "id"), port, chi.URLParam(r, "share_id"))
	if errors.Is(err, lifecycle.ErrShareNotFound) {
		writeProblem(w, r, errShareNotFound)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	// Every edge replica ends what rode on the link now, not at its
	// next re-check.
	if s.previewChanged != nil {
		if err := s.previewChanged(r.Context(), edgeapi.Invalidation{Kind: edgeapi.InvalidateShare, ShareID: sh.ID, SandboxID: sh.SandboxID}); err != nil {
			s.log.WarnContext(r.Context(), "invalidate share", "share_id", sh.ID, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
