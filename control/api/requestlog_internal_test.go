package api

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
)

// failingTokens is a store whose token lookup fails; nothing else of it
// is used before authentication.
type failingTokens struct{ store.Store }

func (failingTokens) AccountByTokenHash(context.Context, []byte, time.Time) (store.Account, store.Token, error) {
	return store.Account{}, store.Token{}, errors.New("token by hash: boom")
}

// TestPreAuthErrorsUseServerLogger: an error answered before the caller
// is authenticated (the token lookup failing, as when Postgres dropped
// the connection under `sbx dev`) is logged through the server's logger,
// with the request ID; it was written through slog's process default, in
// another format and past --log-level.
func TestPreAuthErrorsUseServerLogger(t *testing.T) {
	var logs bytes.Buffer
	s := New(Config{}, Deps{Logger: slog.New(slog.NewTextHandler(&logs, nil)), Store: failingTokens{}})
	secret, _ := token.New(token.PrefixAgent)
	r := httptest.NewRequest("GET", "/api/v1/sandboxes", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, r)

	if w.Code != 500 {
		t.Fatalf("status: got %d, want 500 (%s)", w.Code, w.Body)
	}
	if got := logs.String(); !strings.Contains(got, "token by hash: boom") || !strings.Contains(got, "request_id=") {
		t.Errorf("server log: got %q, want the failure with its request_id", got)
	}
	if strings.Contains(logs.String(), secret) {
		t.Error("the log holds the token")
	}
}
