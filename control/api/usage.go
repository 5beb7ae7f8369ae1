package api

import (
	"net/http"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

type usageView struct {
	From      time.Time          `json:"from"`
	To        time.Time          `json:"to"`
	Platforms []usagePlatformRow `json:"platforms"`
	Compute   float64            `json:"compute_seconds"`
	Storage   float64            `json:"storage_seconds"`
	// SoftCap is the account's monthly minutes soft cap and this calendar
	// month's compute minutes against it; null when the account has no
	// cap. Exceeding it blocks nothing.
	SoftCap *softCapView `json:"soft_cap"`
}

type softCapView struct {
	MonthlyMinutes int     `json:"monthly_minutes"`
	UsedMinutes    float64 `json:"used_minutes"`
	Exceeded       bool    `json:"exceeded"`
}

type usagePlatformRow struct {
	Platform       string  `json:"platform"`
	ComputeSeconds float64 `json:"compute_seconds"`
	StorageSeconds float64 `json:"storage_seconds"`
}

// usage reports billable seconds straight from the ledger. The window
// defaults to the current calendar month (UTC) up to now.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	now := s.now().UTC()
	from := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
	to := now
	q := r.URL.Query()
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"from", &from}, {"to", &to}} {
		if v := q.Get(p.name); v != "" {
			t, err := time.Parse(time.RFC3339, v)
			if err != nil {
				writeProblem(w, r, badQuery(p.name, "must be an RFC 3339 timestamp"))
				return
			}
			*p.dst = t.UTC()
		}
	}
	if !to.After(from) {
		writeProblem(w, r, badQuery("to", "must be after from"))
		return
	}
	rows, err := s.store.Usage(r.Context(), account(r).ID, from, to, now)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := usageView{From: from, To: to, Platforms: []usagePlatformRow{}}
	byPlatform := map[string]int{}
	for _, row := range rows {
		i, ok := byPlatform[row.Platform]
		if !ok {
			i = len(out.Platforms)
			byPlatform[row.Platform] = i
			out.Platforms = append(out.Platforms, usagePlatformRow{Platform: row.Platform})
		}
		switch row.Kind {
		case "compute":
			out.Platforms[i].ComputeSeconds += row.Seconds
			out.Compute += row.Seconds
		case "storage":
			out.Platforms[i].StorageSeconds += row.Seconds
			out.Storage += row.Seconds
		}
	}
	if acct := account(r); acct.MonthlyMinutes > 0 {
		used, err := s.life.MonthMinutes(r.Context(), acct.ID)
		if err != nil {
			writeError(w, r, err)
			return
		}
		out.SoftCap = &softCapView{MonthlyMinutes: acct.MonthlyMinutes, UsedMinutes: used, Exceeded: used > float64(acct.MonthlyMinutes)}
	}
	writeJSON(w, http.StatusOK, out)
}

// ledgerLine is one row of a sandbox's billing ledger: a compute interval
// while it was ready, or a storage interval while it was suspended.
type ledgerLine struct {
	Kind      string     `json:"kind"`
	Platform  string     `json:"platform"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at"`
	// EndReason says why the interval closed (explicit_delete, deadline,
	// idle_offload, …); empty while it is open.
	EndReason string `json:"end_reason"`
	// Seconds counts an open interval up to now.
	Seconds float64 `json:"seconds"`
}

type sandboxUsageView struct {
	SandboxID string       `json:"sandbox_id"`
	Lines     []ledgerLine `json:"lines"`
	Compute   float64      `json:"compute_seconds"`
	Storage   float64      `json:"storage_seconds"`
}

// sandboxUsage lists every ledger line of one sandbox, oldest first, so a
// caller can see each interval and why it closed, not only the totals.
func (s *Server) sandboxUsage(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	sessions, err := s.store.Sessions(r.Context(), sb.ID)
	if err != nil {
		writeError(w, r, err)
		return
	}
	now := s.now().UTC()
	out := sandboxUsageView{SandboxID: sb.ID, Lines: []ledgerLine{}}
	for _, ss := range sessions {
		end := now
		if ss.EndedAt != nil {
			end = *ss.EndedAt
		}
		l := ledgerLine{Kind: string(ss.Kind), Platform: ss.Platform, StartedAt: ss.StartedAt, EndedAt: ss.EndedAt,
			EndReason: ss.EndReason, Seconds: max(0, end.Sub(ss.StartedAt).Seconds())}
		out.Lines = append(out.Lines, l)
		switch ss.Kind {
		case store.SessionCompute:
			out.Compute += l.Seconds
		case store.SessionStorage:
			out.Storage += l.Seconds
		}
	}
	writeJSON(w, http.StatusOK, out)
}
