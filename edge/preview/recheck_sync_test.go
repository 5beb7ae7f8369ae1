package preview

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/sbxedge/sbx/internal/authority"
	"github.com/sbxedge/sbx/internal/podssh"
)

// syncRoutes leads every label to a ready sandbox of its own account.
type syncRoutes struct{}

func (syncRoutes) Resolve(_ context.Context, label string) (Route, error) {
	return Route{SandboxID: "sbx-" + label, AccountID: "acct-" + label, Port: 3000, Ready: true}, nil
}

// noPods: the re-check never dials a sandbox.
type noPods struct{}

func (noPods) Client(context.Context, podssh.Target) (*ssh.Client, error) {
	return nil, errors.New("no pods in this test")
}

// syncAccounts maps token secrets to accounts; revoke drops one, down
// makes every answer a control fault. It counts the questions.
type syncAccounts struct {
	mu     sync.Mutex
	tokens map[string]string
	down   bool
	asked  atomic.Int64
}

func (a *syncAccounts) TokenAccount(_ context.Context, secret string) (string, error) {
	a.asked.Add(1)
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.down {
		return "", errors.New("control unreachable")
	}
	acct, ok := a.tokens[secret]
	if !ok {
		return "", fmt.Errorf("token: %w", ErrInvalidToken)
	}
	return acct, nil
}

func (a *syncAccounts) Member(context.Context, Identity, string) (bool, error) { return false, nil }

func (a *syncAccounts) set(f func()) {
	a.mu.Lock()
	defer a.mu.Unlock()
	f()
}

// TestRecheckLoopClock runs the backstop re-check on synctest's fake
// clock, with the invalidation lost: a connection whose token was revoked
// is ended at the next re-check and not a nanosecond before, with the
// reason its client is told; one whose token stands is kept; a re-check
// that cannot reach control ends nothing, and the next one that can ends
// it.
func TestRecheckLoopClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const every = 30 * time.Second
		accts := &syncAccounts{tokens: map[string]string{"tok-a": "acct-a", "tok-b": "acct-b", "tok-c": "acct-c"}}
		cfg := DefaultConfig()
		cfg.Domain, cfg.Scheme = "preview.test", "http"
		cfg.Resolver, cfg.Pods, cfg.Accounts = syncRoutes{}, noPods{}, accts
		cfg.SessionKey = make([]byte, 32)
		cfg.DevSignIn = &DevSignIn{AccountID: "acct-a", User: "dev"}
		cfg.RecheckInterval = every
		p, err := New(t.Context(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()

		open := func(label, secret string) context.Context {
			rt, err := syncRoutes{}.Resolve(t.Context(), label)
			if err != nil {
				t.Fatal(err)
			}
			r := httptest.NewRequestWithContext(t.Context(), "GET", "http://"+label+".preview.test/", nil)
			ctx, c, ok := p.track(r, label, rt, grant{kind: grantToken, secret: secret}, p.conns.Epoch())
			if !ok {
				t.Fatalf("%s: refused at registration", label)
			}
			t.Cleanup(func() { p.untrack(c) })
			return ctx
		}
		revoked, kept, faulted := open("a", "tok-a"), open("b", "tok-b"), open("c", "tok-c")
		alive := func(when string, ctx context.Context, want bool) {
			t.Helper()
			if got := ctx.Err() == nil; got != want {
				t.Fatalf("%s: connection alive %v (cause %v), want %v", when, got, context.Cause(ctx), want)
			}
		}

		time.Sleep(every / 2)
		accts.set(func() { delete(accts.tokens, "tok-a") }) // and no Revoke: the message was lost
		time.Sleep(every/2 - time.Nanosecond)
		synctest.Wait()
		alive("just before the re-check", revoked, true)
		if n := accts.asked.Load(); n != 0 {
			t.Fatalf("%d questions to control before the first re-check, want 0", n)
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		alive("at the re-check", revoked, false)
		var ended *authority.Ended
		if cause := context.Cause(revoked); !errors.As(cause, &ended) || ended.Detail != "token revoked or expired" {
			t.Errorf("ended with %v, want the token's revocation as the reason", cause)
		}
		alive("a token that stands", kept, true)
		alive("a token that stands", faulted, true)

		// Control goes away, then the token of c is revoked: the re-checks
		// while control is unreachable keep c, the first one after ends it.
		accts.set(func() { accts.down = true; delete(accts.tokens, "tok-c") })
		time.Sleep(3 * every)
		synctest.Wait()
		alive("re-checks without control", faulted, true)
		accts.set(func() { accts.down = false })
		time.Sleep(every)
		synctest.Wait()
		alive("the first re-check with control back", faulted, false)
		alive("a token that stands", kept, true)
	})
}
