package api

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"errors"
	"fmt"
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
}

type portView struct {
	Port       int              `json:"port"`
	URL        string           `json:"url"`
	Access     store.PortAccess `json:"access"`
	HostPolicy store.HostPolicy `json:"host_policy"`
	CreatedAt  time.Time        `json:"created_at"`
}

// portStates are the states a port may be exposed in; a suspended
// sandbox wakes on the first authorised request.
var portStates = map[store.State]bool{
	store.StatePending: true, store.StateReady: true, store.StateSuspended: true,
	store.StateSuspending: true, store.StateRestoring: true,
}

// labelEncoding is lowercase base32: a valid DNS label, no ambiguity
// about case.
var labelEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// newLabel returns 20 random base32 characters (100 bits): unguessable,
// and unrelated to the sandbox ID, so an ID seen in a log or a URL does not
// lead to its previews.
func newLabel() string {
	var b [13]byte
	_, _ = rand.Read(b[:])
	return labelEncoding.EncodeToString(b[:])[:20]
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
	return portView{Port: p.Port, URL: s.previewURL(p.Label), Access: p.Access, HostPolicy: p.HostPolicy, CreatedAt: p.CreatedAt.UTC()}
}

// validatePort checks the request body; sshdPort is the port the
// sandbox's own sshd listens on, which is never a preview: exposing it
// would hand SSH to anyone holding a preview cookie.
func validatePort(req *portRequest, sb store.Sandbox) error {
	if req.Port == nil {
		return &lifecycle.FieldError{Field: "port", Detail: "is required"}
	}
	if *req.Port < 1 || *req.Port > 65535 {
		return &lifecycle.FieldError{Field: "port", Detail: "must be from 1 to 65535"}
	}
	if *req.Port == 22 || *req.Port == sshdPort(sb) {
		return &lifecycle.FieldError{Field: "port", Detail: "is the sandbox's SSH server, which cannot be exposed"}
	}
	switch req.Access {
	case "":
		req.Access = store.AccessPrivate
	case store.AccessPrivate, store.AccessPublic:
	default:
		return &lifecycle.FieldError{Field: "access", Detail: `must be "private" or "public"`}
	}
	switch req.HostPolicy {
	case "":
		req.HostPolicy = store.HostForward
	case store.HostForward, store.HostLocalhost:
	default:
		return &lifecycle.FieldError{Field: "host_policy", Detail: `must be "forward" or "localhost"`}
	}
	return nil
}

func sshdPort(sb store.Sandbox) int {
	_, p, err := net.SplitHostPort(sb.Endpoint)
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		return -1
	}
	return n
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
	acct := account(r)
	id := chi.URLParam(r, "id")
	if _, err := s.life.Get(r.Context(), acct, id); err != nil {
		writeError(w, r, err)
		return
	}
	var got store.PreviewPort
	var created bool
	err := s.store.InTx(r.Context(), func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(r.Context(), id)
		if err != nil {
			return fmt.Errorf("lock sandbox %s: %w", id, err)
		}
		if !portStates[sb.State] {
			return &lifecycle.StateError{State: string(sb.State), Action: "expose a port of"}
		}
		if err := validatePort(&req, sb); err != nil {
			return err
		}
		label := newLabel()
		got, err = tx.PutPreviewPort(r.Context(), store.PreviewPort{
			SandboxID: id, AccountID: acct.ID, Port: *req.Port, Label: label,
			Access: req.Access, HostPolicy: req.HostPolicy, CreatedAt: s.now().UTC().Truncate(time.Microsecond),
		})
		if err != nil {
			return err
		}
		created = got.Label == label
		return tx.InsertEvent(r.Context(), store.Event{
			SandboxID: id, AccountID: acct.ID, Type: "preview_port", State: sb.State,
			Actor: "account:" + acct.ID, At: s.now().UTC(),
			Message: fmt.Sprintf("port %d exposed (%s, host %s)", got.Port, got.Access, got.HostPolicy),
		})
	})
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
	out := make([]portView, 0, len(ps))
	for _, p := range ps {
		out = append(out, s.portView(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"ports": out})
}

func (s *Server) deletePort(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	port, err := strconv.Atoi(chi.URLParam(r, "port"))
	if err != nil || port < 1 || port > 65535 {
		writeProblem(w, r, errPortNotFound)
		return
	}
	acct := account(r)
	if _, err := s.life.Get(r.Context(), acct, id); err != nil {
		writeError(w, r, err)
		return
	}
	var label string
	err = s.store.InTx(r.Context(), func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(r.Context(), id)
		if err != nil {
			return fmt.Errorf("lock sandbox %s: %w", id, err)
		}
		ps, err := tx.PreviewPorts(r.Context(), id)
		if err != nil {
			return err
		}
		for _, p := range ps {
			if p.Port == port {
				label = p.Label
			}
		}
		if err := tx.DeletePreviewPort(r.Context(), id, port); err != nil {
			return err
		}
		return tx.InsertEvent(r.Context(), store.Event{
			SandboxID: id, AccountID: acct.ID, Type: "preview_port", State: sb.State, Actor: "account:" + acct.ID,
			At: s.now().UTC(), Message: fmt.Sprintf("port %d unexposed", port),
		})
	})
	if errors.Is(err, store.ErrNotFound) {
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
