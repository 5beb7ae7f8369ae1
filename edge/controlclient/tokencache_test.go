package controlclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/problem"
)

// tokenControl is control's token endpoint over loopback: tokens maps a
// secret to its account, and calls counts the questions per secret. While
// hold is set, a call tells asked and holds its answer until hold closes,
// so a test can act during a lookup.
type tokenControl struct {
	mu     sync.Mutex
	tokens map[string]string
	calls  map[string]int
	hold   chan struct{}
	asked  chan struct{}
}

func (tc *tokenControl) revoke(secret string) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	delete(tc.tokens, secret)
}

func (tc *tokenControl) count(secret string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	return tc.calls[secret]
}

// clock is a settable time for the cache's TTL.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func newTokenControl(t *testing.T, tokens map[string]string) (*Client, *tokenControl, *clock) {
	t.Helper()
	tc := &tokenControl{tokens: tokens, calls: map[string]int{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+edgeapi.PathPreviewToken, func(w http.ResponseWriter, r *http.Request) {
		var req edgeapi.PreviewTokenRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			t.Errorf("decode: %v", err)
		}
		tc.mu.Lock()
		tc.calls[req.Token]++
		hold, asked := tc.hold, tc.asked
		acct, ok := tc.tokens[req.Token]
		tc.mu.Unlock()
		if hold != nil {
			// The answer is decided; it is held on its way back.
			asked <- struct{}{}
			<-hold
		}
		if !ok {
			problem.Write(w, r, problem.New(http.StatusForbidden, edgeapi.CodePreviewInvalidToken, "no such token"))
			return
		}
		_ = json.NewEncoder(w).Encode(edgeapi.PreviewTokenResponse{AccountID: acct})
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	clk := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c, err := New(Config{BaseURL: ts.URL, Secret: secret, Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	return c, tc, clk
}

// TestTokenAccountCache: an admitted token is asked about once per TTL;
// an invalidation of its account (or of all, or of a kind the edge does
// not know) forgets it, so a revoked token is refused at once; other
// accounts' tokens and other kinds of invalidation keep theirs; refusals
// are never cached.
func TestTokenAccountCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const tokA, tokB = "sbx_agent_a", "sbx_agent_b"
	want := func(t *testing.T, c *Client, tok, acct string, wantErr error) {
		t.Helper()
		got, err := c.TokenAccount(ctx, tok)
		if got != acct || !errors.Is(err, wantErr) {
			t.Fatalf("TokenAccount(%s) = %q, %v; want %q, %v", tok, got, err, acct, wantErr)
		}
	}
	wantCalls := func(t *testing.T, tc *tokenControl, tok string, n int) {
		t.Helper()
		if got := tc.count(tok); got != n {
			t.Fatalf("control asked about %s %d times, want %d", tok, got, n)
		}
	}

	t.Run("cached within the TTL, asked again after", func(t *testing.T) {
		c, tc, clk := newTokenControl(t, map[string]string{tokA: "acct-a"})
		for range 3 {
			want(t, c, tokA, "acct-a", nil)
		}
		wantCalls(t, tc, tokA, 1)
		clk.add(tokenCacheTTL)
		want(t, c, tokA, "acct-a", nil)
		wantCalls(t, tc, tokA, 2)
	})
	t.Run("refusals are not cached", func(t *testing.T) {
		c, tc, _ := newTokenControl(t, map[string]string{})
		want(t, c, tokA, "", edgeapi.ErrPreviewInvalidToken)
		want(t, c, tokA, "", edgeapi.ErrPreviewInvalidToken)
		wantCalls(t, tc, tokA, 2)
	})
	for _, tt := range []struct {
		name        string
		inv         edgeapi.Invalidation
		forgetA     bool // tokA (acct-a) is asked about again
		forgetOther bool // tokB (acct-b) is asked about again
	}{
		{"its account's token revoked", edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-a"}, true, false},
		{"every account's tokens revoked", edgeapi.Invalidation{Kind: edgeapi.InvalidateToken}, true, true},
		{"another account's token revoked", edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-b"}, false, true},
		{"a kind from a newer control", edgeapi.Invalidation{Kind: "share"}, true, true},
		{"a port changed", edgeapi.Invalidation{Kind: edgeapi.InvalidatePort, Label: "l"}, false, false},
		{"a sandbox changed", edgeapi.Invalidation{Kind: edgeapi.InvalidateSandbox, SandboxID: "sb"}, false, false},
		{"members changed", edgeapi.Invalidation{Kind: edgeapi.InvalidateMembers}, false, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, tc, _ := newTokenControl(t, map[string]string{tokA: "acct-a", tokB: "acct-b"})
			want(t, c, tokA, "acct-a", nil)
			want(t, c, tokB, "acct-b", nil)
			// Revoked on control: only a forgotten answer can tell.
			tc.revoke(tokA)
			c.Invalidate(ctx, tt.inv)
			if tt.forgetA {
				want(t, c, tokA, "", edgeapi.ErrPreviewInvalidToken)
				wantCalls(t, tc, tokA, 2)
			} else {
				want(t, c, tokA, "acct-a", nil)
				wantCalls(t, tc, tokA, 1)
			}
			want(t, c, tokB, "acct-b", nil)
			if n := map[bool]int{true: 2, false: 1}[tt.forgetOther]; tc.count(tokB) != n {
				t.Fatalf("control asked about %s %d times, want %d", tokB, tc.count(tokB), n)
			}
		})
	}
	t.Run("an answer fetched before an invalidation is not kept", func(t *testing.T) {
		c, tc, _ := newTokenControl(t, map[string]string{tokA: "acct-a"})
		hold := make(chan struct{})
		release := sync.OnceFunc(func() { close(hold) })
		defer release() // a failure must not leave control's handler held
		tc.hold, tc.asked = hold, make(chan struct{})
		first := make(chan error, 1)
		go func() {
			_, err := c.TokenAccount(ctx, tokA)
			first <- err
		}()
		<-tc.asked // control is answering "acct-a"
		tc.revoke(tokA)
		c.Invalidate(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-a"})
		tc.mu.Lock()
		tc.hold = nil
		tc.mu.Unlock()
		// A request after the invalidation does not join the old lookup
		// (which would hold it until its deadline, a hang detector): it
		// asks control, which refuses.
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if got, err := c.TokenAccount(hctx, tokA); !errors.Is(err, edgeapi.ErrPreviewInvalidToken) {
			t.Fatalf("TokenAccount after the revocation = %q, %v; want %v", got, err, edgeapi.ErrPreviewInvalidToken)
		}
		release()
		if err := <-first; err != nil {
			t.Fatalf("the lookup begun before the revocation: %v, want its (then true) answer", err)
		}
		want(t, c, tokA, "", edgeapi.ErrPreviewInvalidToken)
		wantCalls(t, tc, tokA, 3)
	})
}
