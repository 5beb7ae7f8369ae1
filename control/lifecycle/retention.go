package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sbxedge/sbx/control/store"
)

// ReasonRetention ends a sandbox that stayed suspended longer than its
// retention_days: its storage line closes with it.
const ReasonRetention = "retention"

// retentionWarning is how long before the deletion the warning event
// ("retention_warning") is written.
const retentionWarning = 24 * time.Hour

// SweepRetention deletes the suspended sandboxes whose retention has run
// out, and warns, once per suspension, those a day from it. It runs with
// the reaper.
func (m *Manager) SweepRetention(ctx context.Context) error {
	list, err := m.store.SandboxesInStates(ctx, store.StateSuspended)
	if err != nil {
		return fmt.Errorf("list suspended sandboxes: %w", err)
	}
	now := m.now().UTC()
	var errs []error
	for _, sb := range list {
		if sb.RetentionDays <= 0 || sb.SuspendedAt == nil {
			continue
		}
		expires := sb.SuspendedAt.Add(time.Duration(sb.RetentionDays) * 24 * time.Hour)
		switch {
		case !now.Before(expires):
			suspendedAt := *sb.SuspendedAt
			// Only while it is still that same suspension.
			if _, err := m.endAt(ctx, sb.ID, ReasonRetention, "retention", time.Time{}, func(s store.Sandbox) bool {
				return s.State == store.StateSuspended && s.SuspendedAt != nil && s.SuspendedAt.Equal(suspendedAt)
			}); err != nil {
				errs = append(errs, err)
				continue
			}
			m.log.InfoContext(ctx, "suspended sandbox deleted: retention ran out", "sandbox_id", sb.ID, "retention_days", sb.RetentionDays)
		case now.After(expires.Add(-retentionWarning)) && (sb.RetentionWarnedAt == nil || sb.RetentionWarnedAt.Before(*sb.SuspendedAt)):
			if err := m.warnRetention(ctx, sb.ID, expires); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// warnRetention writes the day-before event, once per suspension.
func (m *Manager) warnRetention(ctx context.Context, id string, expires time.Time) error {
	err := m.store.InTx(ctx, func(tx store.Tx) error {
		sb, err := tx.SandboxForUpdate(ctx, id)
		if err != nil {
			return err
		}
		if sb.State != store.StateSuspended || sb.SuspendedAt == nil || (sb.RetentionWarnedAt != nil && !sb.RetentionWarnedAt.Before(*sb.SuspendedAt)) {
			return nil
		}
		now := m.now().UTC()
		sb.RetentionWarnedAt = &now
		if err := tx.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		return tx.InsertEvent(ctx, store.Event{
			SandboxID: sb.ID, AccountID: sb.AccountID, Type: "retention_warning", State: sb.State, Actor: "retention",
			Message: "suspended longer than its retention_days: it will be deleted at " + expires.Format(time.RFC3339) + " unless it is resumed", At: now,
		})
	})
	if err != nil {
		return fmt.Errorf("warn %s of retention: %w", id, err)
	}
	return nil
}
