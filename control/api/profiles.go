package api

import (
	"net/http"

	"github.com/sbxedge/sbx/internal/egresspolicy"
)

type profileView struct {
	Name     string  `json:"name"`
	Platform string  `json:"platform"`
	CPU      float64 `json:"cpu"`
	MemoryMB int     `json:"memory_mb"`
	DiskGB   int     `json:"disk_gb"`
	// Default marks the profile a create without one gets.
	Default bool `json:"default,omitempty"`
	// Network is the profile's egress policy, the widest a sandbox of it
	// gets.
	Network egresspolicy.Spec `json:"network"`
}

// listProfiles answers which profiles a create may name, so clients can
// offer them (and say which were meant after a typo), and which one a
// create that names none gets.
func (s *Server) listProfiles(w http.ResponseWriter, r *http.Request) {
	ps, err := s.store.Profiles(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := struct {
		Profiles []profileView `json:"profiles"`
	}{Profiles: make([]profileView, 0, len(ps))}
	def := s.life.Config().DefaultProfile
	for _, p := range ps {
		if !s.life.Serves(p.Platform) {
			continue // no hosts of its platform here (sbx dev without --tart: macOS)
		}
		out.Profiles = append(out.Profiles, profileView{Name: p.Name, Platform: p.Platform, CPU: p.CPU, MemoryMB: p.MemoryMB, DiskGB: p.DiskGB, Default: p.Name == def,
			Network: s.life.ProfileNetwork(p.Name).Spec()})
	}
	writeJSON(w, http.StatusOK, out)
}
