package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// egressDecisionView is one line of a sandbox's egress log.
type egressDecisionView struct {
	Time      time.Time `json:"time"`
	Host      string    `json:"host"`
	Port      int       `json:"port"`
	Addr      *string   `json:"addr"`
	Verdict   string    `json:"verdict"`
	Reason    *string   `json:"reason"`
	BytesUp   int64     `json:"bytes_up"`
	BytesDown int64     `json:"bytes_down"`
}

type egressLogView struct {
	Decisions  []egressDecisionView `json:"decisions"`
	NextCursor *string              `json:"next_cursor"`
}

// egressLog is GET /sandboxes/{id}/egress: the gateway's recent
// decisions about the sandbox's outbound connections, newest first.
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	limit, ok := pageLimit(w, r)
	if !ok {
		return
	}
	var before int64
	if c := r.URL.Query().Get("cursor"); c != "" {
		n, err := strconv.ParseInt(c, 10, 64)
		if err != nil || n <= 0 {
			writeProblem(w, r, badQuery("cursor", "is not a cursor this API gave (a next_cursor from an earlier page)"))
			return
		}
		before = n
	}
	list, err := s.store.EgressDecisions(r.Context(), sb.ID, before, limit+1)
	if err != nil {
		writeError(w, r, err)
		return
	}
	list, next := page(list, limit, func(d store.EgressDecision) string { return strconv.FormatInt(d.ID, 10) })
	writeJSON(w, http.StatusOK, egressLogView{Decisions: views(list, func(d store.EgressDecision) egressDecisionView {
		return egressDecisionView{
			Time: d.At, Host: d.Host, Port: d.Port, Addr: optional(d.Addr), Verdict: d.Verdict,
			Reason: optional(d.Reason), BytesUp: d.BytesUp, BytesDown: d.BytesDown,
		}
	}), NextCursor: next})
}
