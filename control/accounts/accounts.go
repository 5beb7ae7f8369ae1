// Package accounts is the operator's domain: accounts, their projects and
// their API tokens. `sbx admin` calls it in process (an operator holds
// the database credentials already, and it must work while control is
// down); each operation is one transaction with the locking the rules
// need, and a revocation is published for the edge and control's streams
// once it commits.
package accounts

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sbxedge/sbx/auth/token"
	"github.com/sbxedge/sbx/control/store"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// ErrExists: the account or project named is there already.
var ErrExists = errors.New("already exists")

// Store is the subset of store.Store the operations use.
type Store interface {
	InTx(ctx context.Context, fn func(store.Tx) error) error
}

// Publish tells every edge and control replica that authority changed
// (the Redis invalidation channel they hear); nil publishes nothing.
type Publish func(ctx context.Context, inv edgeapi.Invalidation) error

// Service runs the operations. Safe for concurrent use.
type Service struct {
	store   Store
	publish Publish
	now     func() time.Time
}

// New returns a Service on st. publish may be nil: control's own poll of
// revoked tokens (control/previewwatch.go) still tells the edge then,
// within its period.
func New(st Store, publish Publish, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: st, publish: publish, now: now}
}

// CreateAccount inserts acct (CreatedAt is set here) with its idle
// timeout override (0: the deployment's default); ErrExists if the ID is
// taken.
func (s *Service) CreateAccount(ctx context.Context, acct store.Account, idle time.Duration) (store.Account, error) {
	acct.CreatedAt = s.now().UTC()
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Account(ctx, acct.ID); err == nil {
			return fmt.Errorf("account %s: %w", acct.ID, ErrExists)
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if err := tx.UpsertAccount(ctx, acct); err != nil {
			return err
		}
		return tx.SetAccountIdleTimeout(ctx, acct.ID, idle)
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("create account: %w", err)
	}
	return acct, nil
}

// UpdateAccount applies change to the account and, when idle is not nil,
// sets its idle timeout override. It holds the account lock sandbox
// creates take (lifecycle.Manager.Admit), so a change never lands between
// a create's count and its insert.
func (s *Service) UpdateAccount(ctx context.Context, id string, change func(*store.Account) error, idle *time.Duration) (store.Account, error) {
	var acct store.Account
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.LockAccount(ctx, id); err != nil {
			return err
		}
		cur, err := tx.Account(ctx, id)
		if err != nil {
			return err
		}
		if err := change(&cur); err != nil {
			return err
		}
		acct = cur
		if err := tx.UpsertAccount(ctx, cur); err != nil {
			return err
		}
		if idle == nil {
			return nil
		}
		return tx.SetAccountIdleTimeout(ctx, id, *idle)
	})
	if err != nil {
		return store.Account{}, fmt.Errorf("set account %s: %w", id, err)
	}
	return acct, nil
}

// CreateProject adds a project to an existing account; ErrExists if the
// project ID is taken.
func (s *Service) CreateProject(ctx context.Context, p store.Project) (store.Project, error) {
	p.CreatedAt = s.now().UTC()
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Account(ctx, p.AccountID); err != nil {
			return err
		}
		if _, err := tx.Project(ctx, p.ID); err == nil {
			return fmt.Errorf("project %s: %w", p.ID, ErrExists)
		}
		return tx.UpsertProject(ctx, p)
	})
	if err != nil {
		return store.Project{}, fmt.Errorf("create project: %w", err)
	}
	return p, nil
}

// Minted is a new token; Secret exists only here (the store keeps its
// hash).
type Minted struct {
	store.Token
	Secret string
}

// MintToken mints a token of kind for an existing account.
func (s *Service) MintToken(ctx context.Context, accountID string, kind store.TokenKind, name string) (Minted, error) {
	prefix := token.PrefixAgent
	switch kind {
	case store.TokenAgent:
	case store.TokenProject:
		prefix = token.PrefixProject
	default:
		return Minted{}, fmt.Errorf("mint token: unknown kind %q", kind)
	}
	secret, hash := token.New(prefix)
	now := s.now()
	tok := store.Token{ID: "tok-" + strconv.FormatInt(now.UnixNano(), 36) + "-" + fmt.Sprintf("%x", hash[:4]),
		AccountID: accountID, Kind: kind, Name: name, Hash: hash, CreatedAt: now.UTC()}
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.Account(ctx, accountID); err != nil {
			return err
		}
		return tx.InsertToken(ctx, tok)
	})
	if err != nil {
		return Minted{}, fmt.Errorf("mint token: %w", err)
	}
	return Minted{Token: tok, Secret: secret}, nil
}

// RevokeToken revokes the token with ID id (store.ErrNotFound if there is
// none; revoking twice is fine) and, once that commits, publishes the
// revocation, so the connections it authorised end on every replica
// without waiting for a poll. A failed publish is returned after the
// revocation stands: the token is refused from now on either way, and the
// caller says that the open connections may linger until the next check.
func (s *Service) RevokeToken(ctx context.Context, id string) error {
	at := s.now().UTC().Truncate(time.Microsecond)
	var accountID string
	err := s.store.InTx(ctx, func(tx store.Tx) error {
		if err := tx.RevokeToken(ctx, id, at); err != nil {
			return err
		}
		// Whose token it was, for the edge to re-check only that
		// account's connections; not found means it was revoked before,
		// and every account's are re-checked.
		toks, err := tx.TokensRevokedSince(ctx, at.Add(-time.Microsecond))
		if err != nil {
			return err
		}
		for _, t := range toks {
			if t.ID == id {
				accountID = t.AccountID
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("revoke token %s: %w", id, err)
	}
	if s.publish == nil {
		return nil
	}
	if err := s.publish(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: accountID}); err != nil {
		return fmt.Errorf("token %s revoked, but telling the edge failed: %w", id, err)
	}
	return nil
}
