package api

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5/middleware"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/httplimit"
	"github.com/sbxedge/sbx/internal/problem"
)

type ctxKey int

const (
	accountKey ctxKey = iota
	loggerKey
	tokenKey
	tokenExpiresKey
)

var (
	errNoToken = problem.New(http.StatusUnauthorized, "unauthenticated",
		"send an account agent token as 'Authorization: Bearer <token>'")
	errBadToken = problem.New(http.StatusUnauthorized, "invalid_token",
		"the token is not valid (unknown, revoked or expired)")
	errManyTokens = problem.New(http.StatusUnauthorized, "invalid_token",
		"send one Authorization header; this request has several")
	errProjectToken = problem.New(http.StatusForbidden, "project_token_refused",
		"project tokens are not accepted by the sandbox API; use an account agent token")
	errGrantToken = problem.New(http.StatusForbidden, "grant_token_refused",
		"grant tokens are for Tuist services inside a sandbox, not for the sandbox API; use an account agent token")
)

// authenticate resolves the bearer token to an account. The token is
// looked up by its SHA-256, so the comparison is on fixed-size digests
// inside the database index and leaks nothing about the secret.
func (s *Server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Authorization is one field (RFC 9110, 11.6.2). With several,
		// this server would act on the first while a proxy or log in
		// front might read another: refused rather than guessed.
		if len(r.Header.Values("Authorization")) > 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx", error="invalid_request"`)
			writeProblem(w, r, errManyTokens)
			return
		}
		secret, ok := bearer(r)
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx"`)
			writeProblem(w, r, errNoToken)
			return
		}
		prefix, err := token.Parse(secret)
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx", error="invalid_token"`)
			writeProblem(w, r, errBadToken)
			return
		}
		if prefix == token.PrefixGrant {
			// Grant tokens live in their own table; saying what they are
			// for beats a bare "invalid token".
			writeProblem(w, r, errGrantToken)
			return
		}
		acct, tok, err := s.store.AccountByTokenHash(r.Context(), token.Hash(secret), s.now())
		if errors.Is(err, store.ErrNotFound) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="sbx", error="invalid_token"`)
			writeProblem(w, r, errBadToken)
			return
		}
		if err != nil {
			writeError(w, r, err)
			return
		}
		if prefix == token.PrefixProject || tok.Kind != store.TokenAgent {
			writeProblem(w, r, errProjectToken)
			return
		}
		// An account's upload may take as long as it keeps moving.
		httplimit.Trust(r)
		next.ServeHTTP(w, s.authenticated(r, acct, tok.ID, expiry(tok.ExpiresAt)))
	})
}

// authenticated is r as the handlers behind auth see it: with the
// account, a logger naming it and the request, and the token's ID and
// expiry (zero: none), which bounds the streams it opens.
func (s *Server) authenticated(r *http.Request, acct store.Account, tokenID string, expires time.Time) *http.Request {
	log := s.log.With("account_id", acct.ID, "request_id", middleware.GetReqID(r.Context()))
	ctx := context.WithValue(r.Context(), accountKey, acct)
	ctx = context.WithValue(ctx, loggerKey, log)
	ctx = context.WithValue(ctx, tokenKey, tokenID)
	ctx = context.WithValue(ctx, tokenExpiresKey, expires)
	return r.WithContext(ctx)
}

func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, secret, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	secret = strings.TrimSpace(secret)
	return secret, secret != ""
}

func account(r *http.Request) store.Account {
	a, _ := r.Context().Value(accountKey).(store.Account)
	return a
}

// callerID is the ID of the agent token that authenticated the request.
func callerID(r *http.Request) string {
	id, _ := r.Context().Value(tokenKey).(string)
	return id
}

// tokenExpires is when the token that authenticated the request expires;
// zero when it does not.
func tokenExpires(r *http.Request) time.Time {
	t, _ := r.Context().Value(tokenExpiresKey).(time.Time)
	return t
}

func expiry(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}

func logger(r *http.Request) *slog.Logger {
	if l, ok := r.Context().Value(loggerKey).(*slog.Logger); ok {
		return l
	}
	return slog.Default()
}
