package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/connlog"
)

// recordStream opens the connection log's record of a stream the API
// serves itself (terminal, exec stream). The client kind is what the
// client states (Sbx-Client) or else what its user agent says.
func (s *Server) recordStream(r *http.Request, kind connlog.Kind, sandboxID string) *connlog.Conn {
	ua := r.UserAgent()
	return s.conns.Open(connlog.Record{
		SandboxID: sandboxID, Kind: kind, Credential: callerID(r), ClientAddr: r.RemoteAddr,
		ClientKind:   connlog.Detect(connlog.Signals{Explicit: r.Header.Get(connlog.HeaderClient), UserAgent: ua}),
		ClientDetail: ua,
	})
}

// endReason is why a stream whose context is ctx ended, for the log.
func endReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return connlog.EndClosed
	}
	return cause.Error()
}

// connectionView is one row of the connection log as the API shows it.
type connectionView struct {
	ID           string     `json:"id"`
	SandboxID    string     `json:"sandbox_id"`
	Kind         string     `json:"kind"`
	Live         bool       `json:"live"`
	Credential   string     `json:"credential"`
	ClientAddr   string     `json:"client_addr"`
	ClientKind   string     `json:"client_kind"`
	ClientDetail string     `json:"client_detail"`
	Channels     []string   `json:"channels"`
	StartedAt    time.Time  `json:"started_at"`
	EndedAt      *time.Time `json:"ended_at"`
	BytesIn      int64      `json:"bytes_in"`
	BytesOut     int64      `json:"bytes_out"`
	EndReason    string     `json:"end_reason"`
}

type connectionListView struct {
	Connections []connectionView `json:"connections"`
	NextCursor  *string          `json:"next_cursor"`
}

func viewConnection(c store.Connection) connectionView {
	ch := c.Channels
	if ch == nil {
		ch = []string{}
	}
	return connectionView{ID: c.ID, SandboxID: c.SandboxID, Kind: string(c.Kind), Live: c.EndedAt == nil,
		Credential: c.Credential, ClientAddr: c.ClientAddr, ClientKind: c.ClientKind, ClientDetail: c.ClientDetail,
		Channels: ch, StartedAt: c.StartedAt, EndedAt: c.EndedAt, BytesIn: c.BytesIn, BytesOut: c.BytesOut, EndReason: c.EndReason}
}

// listSandboxConnections is GET /api/v1/sandboxes/{id}/connections: the
// sandbox's live and recent connections, newest first.
func (s *Server) listSandboxConnections(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	s.listConnections(w, r, sb.ID)
}

// listAccountConnections is GET /api/v1/connections: the account's.
func (s *Server) listAccountConnections(w http.ResponseWriter, r *http.Request) {
	s.listConnections(w, r, "")
}

func (s *Server) listConnections(w http.ResponseWriter, r *http.Request, sandboxID string) {
	q := r.URL.Query()
	limit, ok := pageLimit(w, r)
	if !ok {
		return
	}
	for param := range q {
		if param != "limit" && param != "cursor" && param != "live" {
			writeProblem(w, r, badQuery(param, "is not a filter of this list (filters: live, limit, cursor)"))
			return
		}
	}
	f := store.ConnectionFilter{AccountID: account(r).ID, SandboxID: sandboxID, Before: q.Get("cursor"), Limit: limit + 1}
	if v := q.Get("live"); v != "" {
		live, err := strconv.ParseBool(v)
		if err != nil {
			writeProblem(w, r, badQuery("live", "must be true or false"))
			return
		}
		f.LiveOnly = live
	}
	if f.Before != "" && (len(f.Before) > 64 || !strings.HasPrefix(f.Before, "c_")) {
		writeProblem(w, r, badQuery("cursor", "is not a cursor this API gave (a next_cursor from an earlier page)"))
		return
	}
	list, err := s.store.Connections(r.Context(), f)
	if err != nil {
		writeError(w, r, err)
		return
	}
	list, next := page(list, limit, func(c store.Connection) string { return c.ID })
	writeJSON(w, http.StatusOK, connectionListView{Connections: views(list, viewConnection), NextCursor: next})
}
