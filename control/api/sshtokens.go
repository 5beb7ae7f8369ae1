package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/auth/sshca"
	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// maxSSHTokenTTL is both the default and the ceiling: a credential that
// leaks (a laptop backup, a pasted terminal) is useful for an hour at most,
// and minting another is one call.
const maxSSHTokenTTL = 60

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

// sshTokenStates are the states a credential may be minted in: the sandbox
// exists or is about to, and a suspended one wakes on the connection.
var sshTokenStates = map[store.State]bool{
	store.StatePending: true, store.StateReady: true, store.StateSuspended: true,
}

// createSSHToken mints an ed25519 key pair bound to one sandbox. Only the
// public key's fingerprint is stored; the private key is in this one
// response and nowhere else (not in logs, not in the database).
func (s *Server) createSSHToken(w http.ResponseWriter, r *http.Request) {
	var req sshTokenRequest
	// The body is optional: a bare POST takes the defaults.
	if r.ContentLength != 0 && !s.decode(w, r, &req) {
		return
	}
	ttl := maxSSHTokenTTL
	if req.TTLMinutes != nil {
		if *req.TTLMinutes < 1 || *req.TTLMinutes > maxSSHTokenTTL {
			writeProblem(w, r, unprocessable("ttl_minutes", fmt.Sprintf("must be from 1 to %d", maxSSHTokenTTL)))
			return
		}
		ttl = *req.TTLMinutes
	}
	if s.cfg.SSHHost == "" {
		writeProblem(w, r, errSSHUnavailable)
		return
	}
	acct := account(r)
	id := chi.URLParam(r, "id")
	// Ownership first, outside the transaction, so "not yours" answers
	// exactly like GET does.
	if _, err := s.life.Get(r.Context(), acct, id); err != nil {
		writeError(w, r, err)
		return
	}

	pemKey, signer, err := sshca.GenerateKey()
	if err != nil {
		writeError(w, r, fmt.Errorf("mint ssh key for %s: %w", id, err))
		return
	}
	now := s.now().UTC()
	cred := store.SSHCredential{
		ID: "sshc-" + lifecycle.NewID()[len("sbx-"):], SandboxID: id, AccountID: acct.ID,
		Fingerprint: ssh.FingerprintSHA256(signer.PublicKey()),
		CreatedAt:   now, ExpiresAt: now.Add(time.Duration(ttl) * time.Minute).Truncate(time.Microsecond),
	}
	if err := s.insertSSHCredential(r.Context(), cred, acct.ID); err != nil {
		writeError(w, r, err)
		return
	}
	// The fingerprint is safe to log and lets an operator match broker
	// logs to the credential; the key itself is not.
	logger(r).InfoContext(r.Context(), "ssh credential minted", "sandbox_id", id,
		"credential_id", cred.ID, "fingerprint", cred.Fingerprint, "expires_at", cred.ExpiresAt)

	port := strconv.Itoa(s.cfg.SSHPort)
	writeJSON(w, http.StatusCreated, sshTokenResponse{
		Username: id, Host: s.cfg.SSHHost, Port: s.cfg.SSHPort,
		PrivateKeyPEM: string(pemKey), ExpiresAt: cred.ExpiresAt,
		SSHCommand: "ssh -p " + port + " " + id + "@" + s.cfg.SSHHost,
	})
}

// insertSSHCredential checks the state under the row lock, so a credential
// is never minted for a sandbox that a concurrent DELETE just ended.
func (s *Server) insertSSHCredential(ctx context.Context, cred store.SSHCredential, actor string) error {
	return s.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, cred.SandboxID)
		if err != nil {
			return fmt.Errorf("lock sandbox %s: %w", cred.SandboxID, err)
		}
		if !sshTokenStates[sb.State] {
			return &lifecycle.StateError{State: string(sb.State), Action: "open SSH to"}
		}
		if err := tx.InsertSSHCredential(ctx, cred); err != nil {
			return err
		}
		return tx.InsertEvent(ctx, store.Event{
			SandboxID: sb.ID, AccountID: sb.AccountID, Type: "ssh_credential", State: sb.State,
			Actor: "account:" + actor, At: cred.CreatedAt,
			Message: "SSH credential " + cred.ID + " " + cred.Fingerprint + " until " + cred.ExpiresAt.Format(time.RFC3339),
		})
	})
}
