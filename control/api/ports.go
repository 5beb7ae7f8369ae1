package api

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

var (
	errPreviewUnavailable = problem.New(http.StatusServiceUnavailable, "preview_unavailable",
		"this deployment has no preview proxy configured")
	errPortNotFound = problem.New(http.StatusNotFound, "port_not_found", "that port is not exposed on this sandbox")
)

type portRequest struct {
	Port       *int             `json:"port"`
	Access     store.PortAccess `json:"access"`
	HostPolicy store.HostPolicy `json:"host_policy"`
	Label      string           `json:"label"`
}

type portView struct {
	Port       int              `json:"port"`
	Label      string           `json:"label,omitempty"`
	URL        string           `json:"url"`
	Access     store.PortAccess `json:"access"`
	HostPolicy store.HostPolicy `json:"host_policy"`
	CreatedAt  time.Time        `json:"created_at"`
}

func (s *Server) previewURL(label string) string {
	host := label + "." + s.cfg.PreviewDomain
	scheme := s.cfg.PreviewScheme
	if scheme == "" {
		scheme = "https"
	}
	if p := s.cfg.PreviewPort; p != 0 && !(scheme == "https" && p == 443) && !(scheme == "http" && p == 80) {
		host = net.JoinHostPort(host, strconv.Itoa(p))
	}
	return scheme + "://" + host
}

func (s *Server) portView(p store.PreviewPort) portView {
	return portView{Port: p.Port, Label: p.Name, URL: s.previewURL(p.Label), Access: p.Access, HostPolicy: p.HostPolicy, CreatedAt: p.CreatedAt.UTC()}
}

func (s *Server) createPort(w http.ResponseWriter, r *http.Request) {
	var req portRequest
	if !s.decode(w, r, &req) {
		return
	}
	if s.cfg.PreviewDomain == "" {
		writeProblem(w, r, errPreviewUnavailable)
		return
	}
	if req.Port == nil {
		writeError(w, r, &lifecycle.FieldError{Field: "port", Detail: "is required"})
		return
	}
	got, created, err := s.life.ExposePort(r.Context(), account(r), chi.URLParam(r, "id"),
		lifecycle.PortSpec{Port: *req.Port, Access: req.Access, HostPolicy: req.HostPolicy, Name: req.Label})
	if err != nil {
		writeError(w, r, err)
		return
	}
	// A changed access level must take effect on every edge replica now,
	// not when their caches expire.
	s.invalidatePreview(r.Context(), got.Label)
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.portView(got))
}

func (s *Server) listPorts(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	if _, err := s.life.Get(r.Context(), account(r), id); err != nil {
		writeError(w, r, err)
		return
	}
	ps, err := s.store.PreviewPorts(r.Context(), id)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"ports": views(ps, s.portView)})
}

func (s *Server) deletePort(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(chi.URLParam(r, "port"))
	if err != nil || port < 1 || port > 65535 {
		writeProblem(w, r, errPortNotFound)
		return
	}
	label, err := s.life.UnexposePort(r.Context(), account(r), chi.URLParam(r, "id"), port)
	if errors.Is(err, lifecycle.ErrPortNotFound) {
		writeProblem(w, r, errPortNotFound)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	s.invalidatePreview(r.Context(), label)
	w.WriteHeader(http.StatusNoContent)
}

// invalidatePreview tells the edge a preview host changed. A failure is
// logged, not returned: the row is already committed and the edge's cache
// expires on its own within seconds.
func (s *Server) invalidatePreview(ctx context.Context, label string) {
	if s.previewChanged == nil || label == "" {
		return
	}
	if err := s.previewChanged(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidatePort, Label: label}); err != nil {
		s.log.WarnContext(ctx, "invalidate preview route", "label", label, "err", err)
	}
}
