package api

import (
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/store"
)

// secretView is a secret as the API shows it: never its value.
type secretView struct {
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func newSecretView(s store.Secret) secretView {
	return secretView{Name: s.Name, CreatedAt: s.CreatedAt.UTC(), UpdatedAt: s.UpdatedAt.UTC()}
}

func (s *Server) putSecret(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	if !s.decode(w, r, &req) {
		return
	}
	sec, err := s.life.PutSecret(r.Context(), account(r), req.Name, req.Value)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, newSecretView(sec))
}

func (s *Server) listSecrets(w http.ResponseWriter, r *http.Request) {
	list, err := s.life.Secrets(r.Context(), account(r))
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Secrets []secretView `json:"secrets"`
	}{Secrets: []secretView{}}
	for _, sec := range list {
		out.Secrets = append(out.Secrets, newSecretView(sec))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteSecret(w http.ResponseWriter, r *http.Request) {
	if err := s.life.DeleteSecret(r.Context(), account(r), chi.URLParam(r, "name")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
