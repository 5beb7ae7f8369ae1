package control

import (
	"context"
	"log/slog"
	"time"

	"github.com/sbxedge/sbx/control/lifecycle"
	"github.com/sbxedge/sbx/control/previewroute"
	"github.com/sbxedge/sbx/internal/edgeapi"
)

// Authority that ends outside an API call of control's own still has to
// reach the edge, which ends the preview connections it admitted, and
// control's own exec and terminal streams (api.Server.Invalidate): a
// token revoked with `sbx admin` on the database, a members file edited
// by the operator, a sandbox ended by the reaper or a pod failure. The
// watchers here turn each into an edgeapi.Invalidation.

// revokedTokensEvery is how often the store is asked for revocations
// when control has no Redis: then it is the one road from `sbx admin`
// (which writes the database) to the edge of a running sbx dev. One
// indexed-by-nothing query a second is cheap next to a tokens table of
// thousands, and keeps revocation well under the 5 s the edge promises.
const revokedTokensEvery = time.Second

// revokedTokensSafetyEvery is the interval with Redis: `sbx admin`
// publishes each revocation there in the same call that writes it
// (control/accounts; --redis-url or SBX_REDIS_URL), and every edge hears
// it at once (cmd/sbx TestAdminRevokePublishes). The poll only catches
// a revocation made without Redis, or a lost message.
const revokedTokensSafetyEvery = 30 * time.Second

// revokedTokensPoll is the watcher's interval: the safety poll when
// revocations are published on Redis, else the quick one.
func revokedTokensPoll(published bool) time.Duration {
	if published {
		return revokedTokensSafetyEvery
	}
	return revokedTokensEvery
}

// revokedTokensWindow is how far back each look reaches: revoked_at is
// written with the clock of whoever revoked (sbx admin on another host),
// so a revocation stamped up to this much in the past is still seen; it
// is longer than either poll.
// The edge's periodic re-check catches anything older.
const revokedTokensWindow = time.Minute

// stateNotifier passes every sandbox state change the lifecycle publishes
// on to the edge as well, so connections to a sandbox that ended or was
// suspended are ended on every replica.
type stateNotifier struct {
	lifecycle.Activity
	changed func(ctx context.Context, inv edgeapi.Invalidation) error
	log     *slog.Logger
}

func (n stateNotifier) Publish(ctx context.Context, sandboxID string) error {
	err := n.Activity.Publish(ctx, sandboxID)
	if cerr := n.changed(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateSandbox, SandboxID: sandboxID}); cerr != nil {
		n.log.WarnContext(ctx, "tell the edge of a sandbox state change", "sandbox_id", sandboxID, "err", cerr)
	}
	return err
}

// startRevocationWatch starts the token watcher; it ends the edge's
// preview connections and control's own streams that rode on a revoked
// token. The watchers run until Shutdown.
func (s *Service) startRevocationWatch(ctx context.Context) {
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		s.watchRevokedTokens(ctx, time.Now, revokedTokensPoll(s.rdb != nil))
	}()
}

// watchRevokedTokens publishes a token invalidation for each token
// revoked since it started looking, once.
func (s *Service) watchRevokedTokens(ctx context.Context, now func() time.Time, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	seen := map[string]time.Time{} // token ID -> revoked_at, within the window
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		since := now().Add(-revokedTokensWindow)
		toks, err := s.Store.TokensRevokedSince(ctx, since)
		if err != nil {
			if ctx.Err() == nil {
				s.log.WarnContext(ctx, "look for revoked tokens", "err", err)
			}
			continue
		}
		for _, tok := range toks {
			if _, ok := seen[tok.ID]; ok {
				continue
			}
			seen[tok.ID] = *tok.RevokedAt
			s.log.InfoContext(ctx, "token revoked; telling the edge", "token_id", tok.ID, "account_id", tok.AccountID)
			if err := s.previewChanged(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateToken, AccountID: tok.AccountID}); err != nil {
				s.log.WarnContext(ctx, "tell the edge of a revoked token", "token_id", tok.ID, "err", err)
			}
		}
		for id, at := range seen {
			if at.Before(since) {
				delete(seen, id)
			}
		}
	}
}

// watchMembers reloads the members file as the operator changes it and
// tells the edge, which checks its cookie-admitted connections again.
// It is stopped with the other watchers.
func (s *Service) watchMembers(ctx context.Context, f *previewroute.MembersFile) {
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		f.Watch(ctx, previewroute.MembersWatchInterval, s.log, func() {
			if err := s.previewChanged(ctx, edgeapi.Invalidation{Kind: edgeapi.InvalidateMembers}); err != nil {
				s.log.WarnContext(ctx, "tell the edge the members changed", "err", err)
			}
		})
	}()
}
