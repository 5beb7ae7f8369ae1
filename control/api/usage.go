package api

import (
	"net/http"
	"time"
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
