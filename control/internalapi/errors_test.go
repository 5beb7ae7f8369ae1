package internalapi

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"testing"

	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// TestStoreUnavailableIs503: an edge's question control's database could
// not answer for the moment (its connection terminated) is 503
// "unavailable" with Retry-After, a fault to retry, not 500 internal.
func TestStoreUnavailableIs503(t *testing.T) {
	s := &Server{log: slog.New(slog.DiscardHandler)}
	r := httptest.NewRequest("POST", "/internal/v1/ssh/authorize", nil)
	err := fmt.Errorf("ssh credential: %w", errors.Join(errors.New("FATAL: terminating connection (SQLSTATE 57P01)"), store.ErrUnavailable))
	w := httptest.NewRecorder()
	s.writeError(w, r, err)
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("got %d Retry-After=%q %s; want 503 with Retry-After", w.Code, w.Header().Get("Retry-After"), w.Body)
	}
	if p := s.toProblem(r, err); p.Code != edgeapi.CodeUnavailable {
		t.Errorf("code: got %q, want %q", p.Code, edgeapi.CodeUnavailable)
	}
}
