package api

import (
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

var errProjectNotFound = problem.New(http.StatusNotFound, "project_not_found", "no project with that id in this account")

type introspectRequest struct {
	Token string `json:"token"`
}

// introspectView follows RFC 7662's shape: an inactive token is
// {"active": false} and nothing else, whatever the reason.
type introspectView struct {
	Active    bool       `json:"active"`
	GrantID   string     `json:"grant_id,omitempty"`
	SandboxID string     `json:"sandbox_id,omitempty"`
	AccountID string     `json:"account_id,omitempty"`
	ProjectID string     `json:"project_id,omitempty"`
	Scopes    []string   `json:"scopes,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// introspect tells a Tuist service whether a grant token is active and
// what it grants. It needs no other credential: the token is the secret,
// the answer describes only that token, and an unknown token learns the
// caller nothing but "inactive". Lookups go by SHA-256, so timing says
// nothing about near misses.
func (s *Server) introspect(w http.ResponseWriter, r *http.Request) {
	var req introspectRequest
	if !s.decode(w, r, &req) {
		return
	}
	if req.Token == "" {
		writeProblem(w, r, unprocessable("token", "is required"))
		return
	}
	in, err := s.life.Introspect(r.Context(), req.Token)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := introspectView{Active: in.Active}
	if in.Active {
		exp := in.ExpiresAt.UTC()
		out = introspectView{Active: true, GrantID: in.GrantID, SandboxID: in.SandboxID, AccountID: in.AccountID,
			ProjectID: in.ProjectID, Scopes: in.Scopes, ExpiresAt: &exp}
	}
	writeJSON(w, http.StatusOK, out)
}

type auditEntryView struct {
	ID        int64     `json:"id"`
	Action    string    `json:"action"`
	ProjectID string    `json:"project_id"`
	SandboxID string    `json:"sandbox_id"`
	Caller    string    `json:"caller"`
	Scopes    []string  `json:"scopes"`
	Message   string    `json:"message"`
	At        time.Time `json:"at"`
}

type auditListView struct {
	Entries    []auditEntryView `json:"entries"`
	NextCursor *string          `json:"next_cursor"`
}

// projectAudit lists a project's audit entries, newest first, optionally
// for one sandbox (?sandbox_id=), paged by ?cursor= and ?limit=.
func (s *Server) projectAudit(w http.ResponseWriter, r *http.Request) {
	acct := account(r)
	p, err := s.store.Project(r.Context(), chi.URLParam(r, "id"))
	if errors.Is(err, store.ErrNotFound) || (err == nil && p.AccountID != acct.ID) {
		writeProblem(w, r, errProjectNotFound)
		return
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	q := r.URL.Query()
	limit, ok := pageLimit(w, r)
	if !ok {
		return
	}
	f := store.AuditFilter{AccountID: acct.ID, ProjectID: p.ID, SandboxID: q.Get("sandbox_id"), Limit: limit + 1}
	if v := q.Get("cursor"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			writeProblem(w, r, badQuery("cursor", "must be a next_cursor from an earlier page"))
			return
		}
		f.Before = n
	}
	es, err := s.store.Audit(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	es, next := page(es, limit, func(e store.AuditEntry) string { return strconv.FormatInt(e.ID, 10) })
	writeJSON(w, http.StatusOK, auditListView{Entries: views(es, viewAuditEntry), NextCursor: next})
}

func viewAuditEntry(e store.AuditEntry) auditEntryView {
	scopes := e.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	return auditEntryView{ID: e.ID, Action: e.Action, ProjectID: e.ProjectID,
		SandboxID: e.SandboxID, Caller: e.Caller, Scopes: scopes, Message: e.Message, At: e.At.UTC()}
}
