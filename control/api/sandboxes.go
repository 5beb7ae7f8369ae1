package api

import (
	"encoding/json"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/egresspolicy"
	"github.com/sbxedge/sbx/internal/problem"
)

// sandboxView is the JSON form of a sandbox.
type sandboxView struct {
	ID           string        `json:"id"`
	Status       store.State   `json:"status"`
	Platform     string        `json:"platform"`
	Profile      string        `json:"profile"`
	ProjectID    *string       `json:"project_id"`
	SSHEndpoint  *string       `json:"ssh_endpoint"`
	DeadlineAt   time.Time     `json:"deadline_at"`
	Grants       []store.Grant `json:"grants"`
	CreatedAt    time.Time     `json:"created_at"`
	ReadyAt      *time.Time    `json:"ready_at"`
	SuspendedAt  *time.Time    `json:"suspended_at"`
	TerminatedAt *time.Time    `json:"terminated_at"`
	EndReason    *string       `json:"end_reason"`
	Workspace    *string       `json:"workspace"`
	// Name is null when the sandbox has none; it works wherever the ID
	// does while the sandbox has not ended.
	Name          *string           `json:"name"`
	Labels        map[string]string `json:"labels"`
	WakeOnTraffic bool              `json:"wake_on_traffic"`
	Env           map[string]string `json:"env"`
	// Secrets names what was delivered; values are never in a view.
	Secrets            []store.SecretRef `json:"secrets"`
	IdleTimeoutMinutes *int              `json:"idle_timeout_minutes"`
	KeepAwakeWhileBusy bool              `json:"keep_awake_while_busy"`
	RetentionDays      *int              `json:"retention_days"`
	// Network is the egress policy the sandbox follows now: its own, or
	// its profile's.
	Network egresspolicy.Spec `json:"network"`
	// Credentials names the credential routes the sandbox may use.
	Credentials []string `json:"credentials"`
	// Consumer is null when the create named none.
	Consumer     *store.Consumer `json:"consumer"`
	Reachability reachability    `json:"reachability"`
	// FromSnapshot is the snapshot a fork started as; RecreatedFrom and
	// RecreatedAs link a recreated sandbox and its successor. Null when
	// none.
	FromSnapshot  *string `json:"from_snapshot"`
	RecreatedFrom *string `json:"recreated_from"`
	RecreatedAs   *string `json:"recreated_as"`
}

// reachability tells a client every way into the sandbox.
type reachability struct {
	SSH *sshReach `json:"ssh"`
	// PreviewURLs lists the exposed ports' URLs (GET of one sandbox only;
	// empty in lists, and when no preview proxy is configured).
	PreviewURLs []string `json:"preview_urls"`
	// Workspace is the absolute workspace path inside the sandbox, known
	// once it was provisioned.
	Workspace *string `json:"workspace"`
}

// sshReach is where the SSH broker listens and how to log in: the
// username is the sandbox ID, authenticated with a key from ssh_tokens.
type sshReach struct {
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Username string `json:"username"`
}

func (s *Server) view(sb store.Sandbox) sandboxView {
	v := sandboxView{
		ID: sb.ID, Status: sb.State, Platform: sb.Platform, Profile: sb.Profile,
		DeadlineAt: s.effectiveDeadline(sb), Grants: sb.Grants, CreatedAt: sb.CreatedAt.UTC(),
		ReadyAt: store.UTCPtr(sb.ReadyAt), SuspendedAt: store.UTCPtr(sb.SuspendedAt), TerminatedAt: store.UTCPtr(sb.TerminatedAt),
		ProjectID: optional(sb.ProjectID), EndReason: optional(sb.EndReason), Workspace: optional(sb.Workspace),
	}
	if v.Grants == nil {
		v.Grants = []store.Grant{}
	}
	v.Name, v.Labels, v.WakeOnTraffic = optional(sb.Name), sb.Labels, !sb.NoWakeOnTraffic
	v.FromSnapshot, v.RecreatedFrom, v.RecreatedAs = optional(sb.FromSnapshot), optional(sb.RecreatedFrom), optional(sb.RecreatedAs)
	if v.Labels == nil {
		v.Labels = map[string]string{}
	}
	v.Env, v.Secrets, v.KeepAwakeWhileBusy = sb.Env, sb.Secrets, !sb.IgnoreBusy
	if v.Env == nil {
		v.Env = map[string]string{}
	}
	if v.Secrets == nil {
		v.Secrets = []store.SecretRef{}
	}
	if sb.IdleTimeout > 0 {
		m := int(sb.IdleTimeout / time.Minute)
		v.IdleTimeoutMinutes = &m
	}
	if sb.RetentionDays > 0 {
		d := sb.RetentionDays
		v.RetentionDays = &d
	}
	v.Network, v.Credentials = s.life.SandboxNetwork(sb).Spec(), sb.Credentials
	if v.Credentials == nil {
		v.Credentials = []string{}
	}
	if !sb.Consumer.IsZero() {
		c := sb.Consumer
		v.Consumer = &c
	}
	v.Reachability = reachability{PreviewURLs: []string{}, Workspace: v.Workspace}
	if s.cfg.SSHHost != "" && lifecycle.AdmissionOf(sb) != lifecycle.Ended {
		v.Reachability.SSH = &sshReach{Host: s.cfg.SSHHost, Port: s.cfg.SSHPort, Username: sb.ID}
	}
	if lifecycle.AdmissionOf(sb) == lifecycle.Ready && s.cfg.SSHHost != "" {
		ep := net.JoinHostPort(s.cfg.SSHHost, strconv.Itoa(s.cfg.SSHPort))
		v.SSHEndpoint = &ep
	}
	return v
}

func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.CreateRequest
	if !s.decode(w, r, &req) {
		return
	}
	req.IdempotencyKey = r.Header.Get("Idempotency-Key")
	req.Caller = callerID(r)
	sb, replayed, err := s.life.Create(r.Context(), account(r), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	w.Header().Set("Location", "/api/v1/sandboxes/"+sb.ID)
	writeJSON(w, http.StatusCreated, s.view(sb))
}

// urlSandbox is the sandbox the URL names, when the caller's account may
// see it; otherwise it has answered with the error and returns false.
func (s *Server) urlSandbox(w http.ResponseWriter, r *http.Request) (store.Sandbox, bool) {
	sb, err := s.life.Resolve(r.Context(), account(r), chi.URLParam(r, "id"))
	if err != nil {
		writeError(w, r, err)
		return store.Sandbox{}, false
	}
	return sb, true
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	v := s.view(sb)
	if s.cfg.PreviewDomain != "" {
		ports, err := s.store.PreviewPorts(r.Context(), sb.ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		for _, p := range ports {
			v.Reachability.PreviewURLs = append(v.Reachability.PreviewURLs, s.previewURL(p.Label))
		}
	}
	writeJSON(w, http.StatusOK, v)
}

type listView struct {
	Sandboxes  []sandboxView `json:"sandboxes"`
	NextCursor *string       `json:"next_cursor"`
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, ok := pageLimit(w, r)
	if !ok {
		return
	}
	// A cursor is the last page's last ID and a status one of the
	// Status enum: anything else is a mistake the caller should hear
	// about, not an empty page.
	opts := store.ListOptions{AccountID: account(r).ID, Before: q.Get("cursor"), Limit: limit + 1}
	if opts.Before != "" && !lifecycle.ValidID(opts.Before) {
		writeProblem(w, r, badQuery("cursor", "is not a cursor this API gave (a next_cursor from an earlier page)"))
		return
	}
	for param := range q {
		if !slices.Contains(listParams, param) {
			writeProblem(w, r, badQuery(param, "is not a filter of this list (filters: "+strings.Join(listParams, ", ")+")"))
			return
		}
	}
	if n := q.Get("name"); n != "" {
		if !lifecycle.ValidName(n) {
			writeProblem(w, r, badQuery("name", "is not a sandbox name (a DNS label)"))
			return
		}
		opts.Name = n
	}
	for _, l := range q["label"] {
		k, v, err := lifecycle.ParseLabelFilter(l)
		if err != nil {
			writeProblem(w, r, badQuery("label", "must be key=value with a label key (letters, digits, '-', '_', '.' or '/')"))
			return
		}
		if opts.Labels == nil {
			opts.Labels = map[string]string{}
		}
		opts.Labels[k] = v
	}
	if st := q.Get("status"); st != "" {
		if !slices.Contains(listStates, store.State(st)) {
			writeProblem(w, r, badQuery("status", "must be one of "+strings.Join(stateNames(), ", ")))
			return
		}
		opts.States = []store.State{store.State(st)}
	}
	list, err := s.store.Sandboxes(r.Context(), opts)
	if err != nil {
		writeError(w, r, err)
		return
	}
	list, next := page(list, limit, func(sb store.Sandbox) string { return sb.ID })
	writeJSON(w, http.StatusOK, listView{Sandboxes: views(list, s.view), NextCursor: next})
}

func (s *Server) patchSandbox(w http.ResponseWriter, r *http.Request) {
	var req lifecycle.Patch
	if !s.decode(w, r, &req) {
		return
	}
	sb, err := s.life.Patch(r.Context(), account(r), chi.URLParam(r, "id"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(sb))
}

// deleteSandbox is idempotent: deleting an ended sandbox answers 200 with
// its final state, so retried DELETEs never error.
func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	var withSnaps bool
	switch v := r.URL.Query().Get("delete_snapshots"); v {
	case "", "false":
	case "true":
		withSnaps = true
	default:
		writeProblem(w, r, badQuery("delete_snapshots", "must be true or false"))
		return
	}
	var sb store.Sandbox
	var err error
	if withSnaps {
		sb, _, err = s.life.DeleteWithSnapshots(r.Context(), account(r), chi.URLParam(r, "id"))
	} else {
		sb, err = s.life.Delete(r.Context(), account(r), chi.URLParam(r, "id"))
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(sb))
}

func unprocessable(field, detail string) *problem.Problem {
	p := problem.New(http.StatusUnprocessableEntity, "invalid_request", field+" "+detail)
	p.Errors = []problem.FieldError{{Field: field, Detail: detail}}
	return p
}

// pageLimit reads ?limit= (1 to 200, default 50). It answers the request
// itself and returns false when the value is bad.
func pageLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 50, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 200 {
		writeProblem(w, r, badQuery("limit", "must be an integer from 1 to 200"))
		return 0, false
	}
	return n, true
}

func badQuery(param, detail string) *problem.Problem {
	p := problem.New(http.StatusBadRequest, "invalid_query", param+" "+detail)
	p.Errors = []problem.FieldError{{Field: param, Detail: detail}}
	return p
}

// views maps list through view; an empty list is [] in JSON, never null.
func views[T, V any](list []T, view func(T) V) []V {
	out := make([]V, 0, len(list))
	for _, x := range list {
		out = append(out, view(x))
	}
	return out
}

// page cuts a list fetched with limit+1 rows to limit; when it was longer,
// next is the cursor of the page's last item.
func page[T any](list []T, limit int, cursor func(T) string) (_ []T, next *string) {
	if len(list) > limit {
		list = list[:limit]
		c := cursor(list[limit-1])
		next = &c
	}
	return list, next
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// listParams are the query parameters GET /sandboxes reads; any other is
// refused rather than ignored, so a misspelt filter never lists all.
var listParams = []string{"cursor", "limit", "status", "name", "label"}

// listStates are the states ?status= may name: the Status enum.
var listStates = []store.State{store.StatePending, store.StateReady, store.StateSuspending, store.StateSuspended,
	store.StateRestoring, store.StateTerminating, store.StateTerminated, store.StateFailed}

func stateNames() []string {
	out := make([]string, len(listStates))
	for i, st := range listStates {
		out[i] = string(st)
	}
	return out
}
