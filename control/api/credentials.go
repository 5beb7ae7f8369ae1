package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
)

// credentialView is a credential as the API shows it: never its secret.
type credentialView struct {
	Name       string     `json:"name"`
	Upstream   string     `json:"upstream"`
	Header     string     `json:"header"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at"`
}

func credentialViewOf(c store.Credential) credentialView {
	return credentialView{Name: c.Name, Upstream: c.Upstream, Header: c.Header, CreatedAt: c.CreatedAt, LastUsedAt: c.LastUsedAt}
}

func (s *Server) putCredential(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.CredentialRequest
	if !s.decode(w, r, &req) {
		return
	}
	c, err := s.life.PutCredential(r.Context(), account(r), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, credentialViewOf(c))
}

func (s *Server) listCredentials(w http.ResponseWriter, r *http.Request) {
	list, err := s.store.Credentials(r.Context(), account(r).ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Credentials []credentialView `json:"credentials"`
	}{views(list, credentialViewOf)})
}

func (s *Server) deleteCredential(w http.ResponseWriter, r *http.Request) {
	if err := s.life.DeleteCredential(r.Context(), account(r), chi.URLParam(r, "name")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
