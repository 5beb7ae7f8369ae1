package lifecycle

import (
	"context"
	"fmt"

	"github.com/sbxedge/sbx/control/store"
)

// Admit enforces the account rules, the one place they live: the
// `sandboxes` feature flag, the optional platform allowlist and the
// concurrency limit. Create calls it for every new sandbox; waking a
// suspended sandbox must call it too (a suspended sandbox does not count,
// because it holds no pod, so a wake takes a slot like a create).
//
// It must run inside the transaction that makes the sandbox count (the
// insert in pending, or the move to restoring): it takes the account lock
// (pg_advisory_xact_lock on Postgres; SQLite transactions are already
// serialised), which is held until that transaction ends, so racing
// callers see each other's rows and exactly the limit is admitted. The
// account is read inside the lock, so an operator's change applies at
// once.
func (m *Manager) Admit(ctx context.Context, tx store.Tx, accountID, platform string) error {
	if err := tx.LockAccount(ctx, accountID); err != nil {
		return err
	}
	acct, err := tx.Account(ctx, accountID)
	if err != nil {
		return fmt.Errorf("admit: %w", err)
	}
	if !acct.SandboxesEnabled {
		m.metrics.quotaRefusals.WithLabelValues("feature_disabled").Inc()
		return ErrDisabled
	}
	if len(acct.AllowedPlatforms) > 0 && !contains(acct.AllowedPlatforms, platform) {
		m.metrics.quotaRefusals.WithLabelValues("platform").Inc()
		return fmt.Errorf("%w: %s (allowed: %v)", ErrPlatformNotAllowed, platform, acct.AllowedPlatforms)
	}
	n, err := tx.CountLive(ctx, accountID)
	if err != nil {
		return err
	}
	if n >= acct.ConcurrentLimit {
		m.metrics.quotaRefusals.WithLabelValues("concurrency").Inc()
		return fmt.Errorf("%w: %d of %d sandboxes in use", ErrLimit, n, acct.ConcurrentLimit)
	}
	return nil
}
