package api

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/problem"
)

// A stream ticket lets a browser, which cannot set an Authorization header
// on a WebSocket, open one sandbox's terminal stream: minted with the
// account token (POST …/exec/stream/tickets), it is good once, for that
// sandbox, for ticketTTL or until its token expires, whichever is first
// (a ticket stands in for its token and never outlives it). It is sealed (HMAC) rather than stored, so any
// replica can check it; only its redemption is shared (Tickets).
const (
	ticketTTL    = 30 * time.Second
	ticketPrefix = "sbx_wst_"
)

// Tickets records redeemed stream tickets. Every control replica must
// share one (Redis), or a ticket could be used once per replica.
type Tickets interface {
	// Redeem atomically marks nonce used for ttl and reports whether this
	// call was the first. An error means "unknown": the ticket is refused.
	Redeem(ctx context.Context, nonce string, ttl time.Duration) (bool, error)
}

// ticketClaims is what a ticket carries.
type ticketClaims struct {
	Account string `json:"a"`
	TokenID string `json:"t"`
	Sandbox string `json:"s"`
	Nonce   string `json:"n"`
	Expires int64  `json:"e"` // unix seconds
	// TokenExpires is when the ticket's token expires (unix
	// milliseconds; 0: never): the stream it opens ends then.
	TokenExpires int64 `json:"x,omitempty"`
}

var (
	errBadTicket = problem.New(http.StatusUnauthorized, "invalid_ticket",
		"the stream ticket is not valid (malformed, for another sandbox, expired or already used); mint a new one with POST /api/v1/sandboxes/{id}/exec/stream/tickets")
	errTicketStore = problem.New(http.StatusServiceUnavailable, "ticket_store_unavailable",
		"stream tickets cannot be checked right now; retry, or authenticate with a bearer token")
)

type ticketView struct {
	Ticket    string    `json:"ticket"`
	ExpiresAt time.Time `json:"expires_at"`
	URL       string    `json:"url"`
}

// createStreamTicket mints a ticket for the URL's sandbox.
func (s *Server) createStreamTicket(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.urlSandbox(w, r)
	if !ok {
		return
	}
	if err := lifecycle.Reachable(sb, "open a terminal in"); err != nil {
		writeError(w, r, err)
		return
	}
	nonce := make([]byte, 16)
	_, _ = rand.Read(nonce)
	exp := s.now().Add(ticketTTL)
	tokExp := tokenExpires(r)
	if !tokExp.IsZero() && tokExp.Before(exp) {
		exp = tokExp
	}
	exp = exp.Truncate(time.Second) // earlier, never later, than both
	c := ticketClaims{Account: sb.AccountID, TokenID: callerID(r), Sandbox: sb.ID,
		Nonce: base64.RawURLEncoding.EncodeToString(nonce), Expires: exp.Unix()}
	if !tokExp.IsZero() {
		c.TokenExpires = tokExp.UnixMilli()
	}
	tk := s.sealTicket(c)
	writeJSON(w, http.StatusCreated, ticketView{Ticket: tk, ExpiresAt: exp.UTC(),
		URL: "/api/v1/sandboxes/" + sb.ID + "/exec/stream?ticket=" + url.QueryEscape(tk)})
}

func (s *Server) sealTicket(c ticketClaims) string {
	payload, _ := json.Marshal(c)
	body := base64.RawURLEncoding.EncodeToString(payload)
	return ticketPrefix + body + "." + base64.RawURLEncoding.EncodeToString(s.ticketMAC(body))
}

func (s *Server) ticketMAC(body string) []byte {
	m := hmac.New(sha256.New, s.ticketKey)
	m.Write([]byte(ticketPrefix + body))
	return m.Sum(nil)
}

// redeemTicket checks a ticket for sandboxID and uses it up.
func (s *Server) redeemTicket(ctx context.Context, tk, sandboxID string) (ticketClaims, error) {
	var c ticketClaims
	body, mac, ok := strings.Cut(strings.TrimPrefix(tk, ticketPrefix), ".")
	if !ok || !strings.HasPrefix(tk, ticketPrefix) {
		return c, errBadTicket
	}
	got, err := base64.RawURLEncoding.DecodeString(mac)
	if err != nil || !hmac.Equal(got, s.ticketMAC(body)) {
		return c, errBadTicket
	}
	payload, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil || json.Unmarshal(payload, &c) != nil {
		return c, errBadTicket
	}
	now := s.now()
	left := time.Unix(c.Expires, 0).Sub(now)
	if c.Sandbox != sandboxID || left <= 0 {
		return c, errBadTicket
	}
	// Minted with Expires no later than this; checked again all the same,
	// as the token's own expiry is what a ticket may never outlive.
	if exp := c.tokenExpires(); !exp.IsZero() && !now.Before(exp) {
		return c, errBadTicket
	}
	// The ticket stands in for its token, so it dies with it: a token
	// revoked after minting would otherwise open a terminal for
	// ticketTTL, and one that no re-check ever ends (the revocation's
	// invalidation came before the stream was there to be checked).
	revoked, err := s.tokenRevokedSince(ctx, c.TokenID, time.Unix(c.Expires, 0).Add(-ticketTTL-streamRevokedWindow))
	if err != nil {
		s.log.WarnContext(ctx, "check stream ticket's token", "err", err)
		return c, errTicketStore
	}
	if revoked {
		return c, errBadTicket
	}
	first, err := s.tickets.Redeem(ctx, c.Nonce, left+time.Second)
	if err != nil {
		s.log.WarnContext(ctx, "redeem stream ticket", "err", err)
		return c, errTicketStore
	}
	if !first {
		return c, errBadTicket
	}
	return c, nil
}

// tokenExpires is when the ticket's token expires; zero when never.
func (c ticketClaims) tokenExpires() time.Time {
	if c.TokenExpires == 0 {
		return time.Time{}
	}
	return time.UnixMilli(c.TokenExpires)
}

// tokenRevokedSince reports whether the token id was revoked after since.
func (s *Server) tokenRevokedSince(ctx context.Context, id string, since time.Time) (bool, error) {
	toks, err := s.store.TokensRevokedSince(ctx, since)
	if err != nil {
		return false, fmt.Errorf("tokens revoked since %s: %w", since, err)
	}
	return slices.ContainsFunc(toks, func(t store.Token) bool { return t.ID == id }), nil
}
