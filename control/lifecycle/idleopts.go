package lifecycle

import (
	"context"
	"fmt"
	"time"
)

// maxRetentionDays bounds retention_days in the API; the deployment's
// maximum lifetime bounds it further.
const maxRetentionDays = 365

// accountIdleTimeout is the idle timeout the account's sandboxes get
// unless they ask for a shorter one.
func (m *Manager) accountIdleTimeout(ctx context.Context, accountID string) (time.Duration, error) {
	d, err := m.store.AccountIdleTimeout(ctx, accountID)
	if err != nil {
		return 0, fmt.Errorf("idle timeout of account %s: %w", accountID, err)
	}
	if d <= 0 {
		d = m.cfg.IdleTimeout
	}
	return d, nil
}

// validateIdle checks a create's idle_timeout_minutes (at most the
// account's idle timeout) and retention_days (at most the maximum
// lifetime, in whole days rounded up).
func (m *Manager) validateIdle(ctx context.Context, accountID string, idleMinutes, retentionDays *int) (time.Duration, int, error) {
	var idle time.Duration
	if idleMinutes != nil {
		limit, err := m.accountIdleTimeout(ctx, accountID)
		if err != nil {
			return 0, 0, err
		}
		idle = time.Duration(*idleMinutes) * time.Minute
		if *idleMinutes < 1 || idle > limit {
			return 0, 0, invalid("idle_timeout_minutes", "must be from 1 to the account's idle timeout, %s", limit)
		}
	}
	retention := 0
	if retentionDays != nil {
		maxDays := min(int((m.cfg.MaxLifetime+24*time.Hour-1)/(24*time.Hour)), maxRetentionDays)
		if *retentionDays < 1 || *retentionDays > maxDays {
			return 0, 0, invalid("retention_days", "must be from 1 to %d (the maximum lifetime)", maxDays)
		}
		retention = *retentionDays
	}
	return idle, retention, nil
}
