package accounts_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/accounts"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/control/store/postgres"
	"github.com/sbxedge/sbx/control/store/sqlite"
	"github.com/sbxedge/sbx/internal/edgeapi"
	"github.com/sbxedge/sbx/internal/testkit/testdb"
)

// published records what a Service published.
type published struct {
	mu   sync.Mutex
	invs []edgeapi.Invalidation
}

func (p *published) publish(_ context.Context, inv edgeapi.Invalidation) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.invs = append(p.invs, inv)
	return nil
}

func (p *published) all() []edgeapi.Invalidation {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]edgeapi.Invalidation(nil), p.invs...)
}

func open(t *testing.T, backend string) store.Store {
	t.Helper()
	var st store.Store
	var err error
	if backend == "postgres" {
		st, err = postgres.Open(t.Context(), testdb.Postgres(t), nil)
	} else {
		st, err = sqlite.Open(t.Context(), t.TempDir()+"/sbx.db", nil)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestOperations: each operation on both stores, and a revocation is
// published once it commits, naming the token's account.
func TestOperations(t *testing.T) {
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			st := open(t, backend)
			var pub published
			svc := accounts.New(st, pub.publish, nil)

			acct, err := svc.CreateAccount(ctx, store.Account{ID: "acct-a", Name: "A", ConcurrentLimit: 2, SandboxesEnabled: true}, time.Minute)
			if err != nil || acct.CreatedAt.IsZero() {
				t.Fatalf("CreateAccount = %+v, %v", acct, err)
			}
			if _, err := svc.CreateAccount(ctx, store.Account{ID: "acct-a", Name: "A2"}, 0); !errors.Is(err, accounts.ErrExists) {
				t.Fatalf("second CreateAccount: %v, want ErrExists", err)
			}
			if idle, err := st.AccountIdleTimeout(ctx, "acct-a"); err != nil || idle != time.Minute {
				t.Fatalf("idle timeout %v, %v; want 1m", idle, err)
			}

			off := time.Duration(0)
			acct, err = svc.UpdateAccount(ctx, "acct-a", func(a *store.Account) error { a.ConcurrentLimit = 5; return nil }, &off)
			if err != nil || acct.ConcurrentLimit != 5 || acct.Name != "A" {
				t.Fatalf("UpdateAccount = %+v, %v; want limit 5, name kept", acct, err)
			}
			if idle, _ := st.AccountIdleTimeout(ctx, "acct-a"); idle != 0 {
				t.Fatalf("idle timeout %v after clearing it", idle)
			}
			refuse := errors.New("refused")
			if _, err := svc.UpdateAccount(ctx, "acct-a", func(a *store.Account) error { a.ConcurrentLimit = 9; return refuse }, nil); !errors.Is(err, refuse) {
				t.Fatalf("UpdateAccount with a refusing change: %v", err)
			}
			if got, _ := st.Account(ctx, "acct-a"); got.ConcurrentLimit != 5 {
				t.Fatalf("a refused change was written: limit %d", got.ConcurrentLimit)
			}
			if _, err := svc.UpdateAccount(ctx, "nope", func(*store.Account) error { return nil }, nil); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("UpdateAccount of an unknown account: %v", err)
			}

			const pid = "6f1c2a3b-0000-4000-8000-000000000001"
			if _, err := svc.CreateProject(ctx, store.Project{ID: pid, AccountID: "acct-a", Name: "web"}); err != nil {
				t.Fatal(err)
			}
			if _, err := svc.CreateProject(ctx, store.Project{ID: pid, AccountID: "acct-a", Name: "web2"}); !errors.Is(err, accounts.ErrExists) {
				t.Fatalf("second CreateProject: %v, want ErrExists", err)
			}
			if _, err := svc.CreateProject(ctx, store.Project{ID: "6f1c2a3b-0000-4000-8000-000000000002", AccountID: "nope", Name: "x"}); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("CreateProject for an unknown account: %v", err)
			}

			if _, err := svc.MintToken(ctx, "nope", store.TokenAgent, "x"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("MintToken for an unknown account: %v", err)
			}
			m, err := svc.MintToken(ctx, "acct-a", store.TokenAgent, "ci")
			if err != nil || !strings.HasPrefix(m.ID, "tok-") {
				t.Fatalf("MintToken = %+v, %v", m.Token, err)
			}
			if prefix, err := token.Parse(m.Secret); err != nil || prefix != token.PrefixAgent {
				t.Fatalf("secret prefix %q, %v; want an agent token", prefix, err)
			}
			if _, tok, err := st.AccountByTokenHash(ctx, token.Hash(m.Secret), time.Now()); err != nil || tok.ID != m.ID {
				t.Fatalf("minted token not found by its secret: %+v, %v", tok, err)
			}
			if len(pub.all()) != 0 {
				t.Fatalf("published %+v before any revocation", pub.all())
			}

			if err := svc.RevokeToken(ctx, m.ID); err != nil {
				t.Fatal(err)
			}
			if _, _, err := st.AccountByTokenHash(ctx, token.Hash(m.Secret), time.Now()); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("revoked token still accepted: %v", err)
			}
			want := edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: "acct-a"}
			if got := pub.all(); len(got) != 1 || got[0] != want {
				t.Fatalf("published %+v, want [%+v]", got, want)
			}
			if err := svc.RevokeToken(ctx, "tok-nope"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("RevokeToken of an unknown token: %v", err)
			}
			if got := pub.all(); len(got) != 1 {
				t.Fatalf("an unknown token's revocation was published: %+v", got)
			}
		})
	}
}

// TestRevokePublishFailure: the revocation stands when telling the edge
// fails, and the caller hears of the failure.
func TestRevokePublishFailure(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	st := open(t, "sqlite")
	down := errors.New("redis down")
	svc := accounts.New(st, func(context.Context, edgeapi.Invalidation) error { return down }, nil)
	if _, err := svc.CreateAccount(ctx, store.Account{ID: "acct-a", Name: "A", SandboxesEnabled: true}, 0); err != nil {
		t.Fatal(err)
	}
	m, err := svc.MintToken(ctx, "acct-a", store.TokenAgent, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.RevokeToken(ctx, m.ID); !errors.Is(err, down) {
		t.Fatalf("RevokeToken = %v, want the publish failure", err)
	}
	if _, _, err := st.AccountByTokenHash(ctx, token.Hash(m.Secret), time.Now()); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("token accepted after a revocation whose publish failed: %v", err)
	}
}
