package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/internal/problem"
)

var errSSHUnavailable = problem.New(http.StatusServiceUnavailable, "ssh_unavailable",
	"this deployment has no SSH broker configured")

type sshTokenRequest struct {
	TTLMinutes *int `json:"ttl_minutes"`
}

type sshTokenResponse struct {
	Username      string    `json:"username"`
	Host          string    `json:"host"`
	Port          int       `json:"port"`
	PrivateKeyPEM string    `json:"private_key_pem"`
	ExpiresAt     time.Time `json:"expires_at"`
	SSHCommand    string    `json:"ssh_command"`
}

// createSSHToken mints an ed25519 key pair bound to one sandbox (see
// lifecycle.MintSSHCredential). The private key is in this one response
// and nowhere else (not in logs, not in the database).
func (s *Server) createSSHToken(w http.ResponseWriter, r *http.Request) {
	var req sshTokenRequest
	// The body is optional: a bare POST takes the defaults.
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	if s.cfg.SSHHost == "" {
		writeProblem(w, r, errSSHUnavailable)
		return
	}
	ttl := lifecycle.MaxSSHCredentialMinutes
	if req.TTLMinutes != nil {
		ttl = *req.TTLMinutes
	}
	id := chi.URLParam(r, "id")
	cred, err := s.life.MintSSHCredential(r.Context(), account(r), callerID(r), id, ttl)
	if err != nil {
		writeError(w, r, err)
		return
	}
	// The fingerprint is safe to log and lets an operator match broker
	// logs to the credential; the key itself is not.
	logger(r).InfoContext(r.Context(), "ssh credential minted", "sandbox_id", id,
		"credential_id", cred.ID, "fingerprint", cred.Fingerprint, "expires_at", cred.ExpiresAt)
	writeJSON(w, http.StatusCreated, sshTokenResponse{
		Username: id, Host: s.cfg.SSHHost, Port: s.cfg.SSHPort,
		PrivateKeyPEM: string(cred.PrivateKeyPEM), ExpiresAt: cred.ExpiresAt,
		SSHCommand: "ssh -p " + strconv.Itoa(s.cfg.SSHPort) + " " + id + "@" + s.cfg.SSHHost,
	})
}
